"""An omp-style fold file written by acp-kernel's own code (``tests/fixtures/hosts/omp/``: the wire codec, the
compression core and ``StateStore``; see ``tools/hostlogs/omp/``) read as the kernel reads it: every block (id, tier,
topic, summary, the stream positions it covers, nesting, active), the stored stream, and the note that omp's message
ids are content hashes no session log holds."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acpmem.core.errors import TranscriptError
from acpmem.hosts.transcripts import read_transcript

OMP = Path(__file__).parent / "fixtures" / "hosts" / "omp"
TRUTH = json.loads((OMP / "truth.json").read_text())
FOLD = OMP / TRUTH["file"]


def test_the_fold_file_is_the_stores_envelope():
    doc = json.loads(FOLD.read_text())
    assert list(doc) == ["version", "savedAt", "id", "payload"] and doc["id"] == TRUTH["id"]
    assert list(doc["payload"]) == ["identities", "foldedLen", "state", "coreMessages", "appliedCallIds",
                                    "rejectStreak"]


def test_every_block_and_the_stored_stream_as_the_kernel_says():
    t = read_transcript(FOLD)
    assert t.container == "omp"
    position = {m["id"]: i for i, m in enumerate(TRUTH["stream"])}
    assert [(b.id, b.tier, b.topic, b.summary, b.seqs, b.nested, b.active) for b in t.blocks] == [
        (b["blockId"], b["tier"], b["topic"], b["summary"], tuple(sorted(position[i] for i in b["effectiveMessageIds"])),
         tuple(b["directBlockIds"]), b["active"]) for b in TRUTH["blocks"]]
    assert [(m.seq, m.id, m.role) for m in t.messages] == [
        (i, m["id"], m["role"] if m["role"] != "tool" else "user") for i, m in enumerate(TRUTH["stream"])]
    assert any("content hashes" in w and "no session log holds them" in w for w in t.warnings)
    assert t.block("b3").nested == ("b1", "b2")


def test_acp_memory_blocks_lists_them_and_says_what_the_ids_are():
    run = subprocess.run([sys.executable, "-m", "acpmem", "blocks", str(FOLD)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert [line.split()[0] for line in run.stdout.splitlines() if not line.startswith(" ")] == ["b1", "b2", "b3"]
    assert "missing or unknown role" not in run.stderr and "content hashes" in run.stderr


def test_a_damaged_fold_file_is_one_clear_line(tmp_path):
    bad = tmp_path / FOLD.name
    bad.write_text(FOLD.read_text()[:500])
    with pytest.raises(TranscriptError) as err:
        read_transcript(bad)
    assert str(bad) in err.value.line() and "\n" not in err.value.line()
