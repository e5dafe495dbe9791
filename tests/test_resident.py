"""The per-turn read path (``list --format prompt``): what it loads, and that the read-only vault answers exactly as
the full one does."""
from __future__ import annotations

import json
import subprocess
import sys

from acpmem.vault import reader
from acpmem.read import resident
from acpmem.vault.reader import VaultReader
from conftest import PINNED

PROBE = """
import json, sys
from acpmem.cli.fast import try_fast
code = try_fast(["list", "--format", "prompt", "--vault", sys.argv[1]], "acpmem")
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def test_prompt_listing_loads_no_write_machinery_typer_or_dataclasses(example_vault):
    p = subprocess.run([sys.executable, "-c", PROBE, str(example_vault.root)], capture_output=True, text=True,
                       timeout=60)
    report = json.loads(p.stderr)
    assert report["code"] == 0 and "<<acpmem-data" in p.stdout
    loaded = set(report["modules"])
    assert "acpmem.search.catalog" in loaded  # the probe did take the read path
    # the write side (git, lock, journal), typer, and dataclasses+inspect (~35 ms with the classes they generate)
    assert not loaded & {"acpmem.vault.writer", "acpmem.vault.gitrun", "acpmem.vault.gitlib", "pygit2", "typer",
                         "dataclasses", "inspect", "typing",
                         "yaml", "hashlib"}


def test_reader_gives_the_index_and_scores_the_vault_gives(example_vault, cli):
    v = example_vault
    entries = v.load().entries
    v.mark_read([entries[0].id])
    (v.root / "entries" / "broken.md").write_text("no frontmatter\n")
    r = VaultReader(v.root, clock=v.clock)
    try:
        for seed in (1, 2):
            for budget in (None, 120):
                assert resident.resident_index(r, seed=seed, budget_tokens=budget) == \
                    resident.resident_index(v, seed=seed, budget_tokens=budget)
        assert [s.to_json() for s in reader.scores(r, seed=3)] == [s.to_json() for s in reader.scores(v, seed=3)]
        assert r.load() == v.load() and r.load().problems[0].path == "entries/broken.md"
        assert r.resolve(entries[1].id[:5]) == v.resolve(entries[1].id[:5])
    finally:
        r.close()
    assert r.clock() == PINNED
