"""``acp memory import`` and ``acp memory export`` (acpmem.upkeep.importing, importformats, exporting) on the
files under tests/fixtures/import/ (their README says how each was made), a real vault and real git."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from acpmem.upkeep.exporting import export
from acpmem.upkeep.importing import import_source, plan
from acpmem.upkeep.importrules import BEGIN_MARK, END_MARK, text_hash

FIX = Path(__file__).parent / "fixtures" / "import"


def _head(v) -> str:
    return subprocess.run(["git", "-C", str(v.root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _commits(v) -> int:
    return int(subprocess.run(["git", "-C", str(v.root), "rev-list", "--count", "HEAD"], capture_output=True,
                              text=True, check=True).stdout)


def _live(v):
    return {e.id: e for e in v.load(with_reads=False).entries if not e.superseded}


def _copy(src: str, tmp_path: Path) -> Path:
    dst = tmp_path / "src" / Path(src).name
    if (FIX / src).is_dir():
        shutil.copytree(FIX / src, dst)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIX / src, dst)
    return dst


# --------------------------------------------------------------------------------------------- import

def test_a_claude_code_memory_folder_becomes_entries_with_provenance_in_one_commit_and_is_recallable(vault):
    from acpmem.read.retrieval import recall

    before = _commits(vault)
    p = import_source(vault, str(FIX / "claude-code" / "memory"))
    assert _commits(vault) == before + 1 and p.commit == _head(vault)
    assert p.counts()["new"] == 4 and p.counts()["skipped"] == 4   # the four index lines of MEMORY.md
    entries = {e.source["file"].rsplit("/", 1)[1]: e for e in _live(vault).values()}
    assert {k: (e.type, e.importance) for k, e in entries.items()} == {
        "user_short_answers.md": ("user-preference", 7), "feedback_no_mocks.md": ("lesson", 7),
        "project_billing_freeze.md": ("fact", 6), "reference_incident_tracker.md": ("reference", 5)}
    e = entries["feedback_no_mocks.md"]
    assert e.title == "Integration tests must hit a real Postgres, never a mocked repository"
    assert e.source["by"] == "import" and e.source["harness"] == "claude-code"
    assert e.source["format"] == "claude-memory" and e.source["key"] == "file" and e.source["line"] == 8
    assert e.source["hash"] == text_hash(e.body) and e.body.startswith("Integration tests run against a real")
    log = subprocess.run(["git", "-C", str(vault.root), "log", "-1", "--format=%B"], capture_output=True,
                         text=True).stdout
    assert "Acpmem-Kind: import" in log
    hits = recall(vault, "phone meetings answers")
    assert hits and hits[0].entry.source["file"].endswith("user_short_answers.md")


def test_agents_md_keeps_the_project_notes_and_skips_the_commands(vault):
    p = import_source(vault, str(FIX / "codex" / "AGENTS.md"))
    by = {i.candidate.text: i for i in p.items}
    assert by["Use `uv sync` to install dependencies."].action == "skipped"
    assert "instruction" in by["Run `uv run pytest -q` before opening a pull request."].why
    assert by["Title format: [<project_name>] <Title>"].action == "skipped"
    assert by["Never commit generated files under `dist/`."].action == "new"
    written = [e for e in _live(vault).values()]
    assert len(written) == 3 and all(e.source["harness"] == "codex" for e in written)
    assert {e.source["section"] for e in written} == {"AGENTS.md > Project notes"}


@pytest.mark.parametrize("src, fmt, new", [
    ("claude-code/CLAUDE.md", "claude-md", 8), ("codex/memories/MEMORY.md", "codex-memories", 3),
    ("gemini/GEMINI.md", "gemini", 4), ("cline/memory-bank", "cline", 5), ("cursor", "cursor", 5),
    ("basic-memory/search-design.md", "basic-memory", 3), ("claude-recall/3f2c9a1e-sess", "claude-recall", 3),
    ("acp-handoff/handoff.md", "acp-handoff", 2)])
def test_each_format_is_told_from_its_path_and_content(vault, src, fmt, new):
    p = plan(vault, str(FIX / src))
    assert p.format == fmt and p.counts()["new"] == new, [(i.action, i.why) for i in p.items]


def test_the_formats_own_rules_choose_type_and_importance(vault):
    codex = {i.candidate.type: i.candidate.importance for i in plan(vault, str(FIX / "codex/memories/MEMORY.md")).items
             if i.action == "new"}
    assert codex == {"user-preference": 7, "fact": 6, "lesson": 6}
    recall_ = plan(vault, str(FIX / "claude-recall/3f2c9a1e-sess")).items
    assert [i.candidate.key for i in recall_ if i.action == "new"] == ["s3", "rule1", "rule3"]   # s1, s2: digested
    basic = [i.candidate for i in plan(vault, str(FIX / "basic-memory/search-design.md")).items if i.action == "new"]
    assert basic[0].text.startswith("We use SQLite FTS5") and not basic[0].text.endswith("#search")
    assert [c.type for c in basic] == ["decision", "lesson", "fact"]


def test_running_an_import_again_changes_nothing(vault):
    import_source(vault, str(FIX / "claude-code" / "CLAUDE.md"))
    head, n = _head(vault), len(_live(vault))
    again = import_source(vault, str(FIX / "claude-code" / "CLAUDE.md"))
    assert again.commit is None and _head(vault) == head and len(_live(vault)) == n
    assert again.counts()["new"] == 0 and again.counts()["unchanged"] == 8


def test_a_forgotten_import_stays_forgotten_on_a_re_run(vault):
    """A person forgot an imported entry: importing the same file again does not bring it back (it is skipped and
    names the forgotten id); the rest stays unchanged and nothing is committed."""
    import_source(vault, str(FIX / "codex" / "AGENTS.md"))
    gone = next(e for e in _live(vault).values() if e.title.startswith("Deploys go out"))
    vault.forget(gone.id, "not how we deploy any more")
    head, n = _head(vault), len(_live(vault))
    again = import_source(vault, str(FIX / "codex" / "AGENTS.md"))
    assert again.commit is None and _head(vault) == head and len(_live(vault)) == n
    (item,) = [i for i in again.items if i.match == gone.id]
    assert item.action == "skipped" and "forgotten" in item.why
    assert again.counts()["new"] == 0


def test_a_changed_source_is_offered_as_an_update_that_supersedes_the_old_entry(vault, tmp_path):
    folder = _copy("claude-code/memory", tmp_path)
    import_source(vault, str(folder))
    old = next(e for e in _live(vault).values() if e.source["file"].endswith("project_billing_freeze.md"))
    f = folder / "project_billing_freeze.md"
    f.write_text(f.read_text().replace("2027-01-15", "2027-02-01"))
    p = import_source(vault, str(folder))
    assert p.counts() == {"new": 0, "update": 1, "unchanged": 3, "duplicate": 0, "contradiction": 0, "skipped": 4}
    (item,) = [i for i in p.items if i.action == "update"]
    assert item.match == old.id
    live = _live(vault)
    assert old.id not in live and live[item.id].supersedes == (old.id,) and "2027-02-01" in live[item.id].body
    assert import_source(vault, str(folder)).commit is None


def test_a_persons_edit_of_an_imported_entry_is_never_replaced(vault, tmp_path):
    folder = _copy("claude-code/memory", tmp_path)
    import_source(vault, str(folder))
    e = next(e for e in _live(vault).values() if e.source["file"].endswith("project_billing_freeze.md"))
    path = vault.root / e.path
    edited = path.read_text().replace("only security fixes may land there", "only security fixes (and the "
                                                                             "audit's own requests) may land there")
    path.write_text(edited)
    assert import_source(vault, str(folder)).counts()["unchanged"] == 4    # the edit is committed as a human edit
    f = folder / "project_billing_freeze.md"
    f.write_text(f.read_text().replace("2027-01-15", "2027-02-01"))
    p = import_source(vault, str(folder))
    (item,) = [i for i in p.items if i.match == e.id]
    assert item.action == "skipped" and "edited by a person" in item.why
    assert path.read_text() == edited and e.id in _live(vault)


def test_a_memory_the_vault_already_holds_is_a_duplicate_by_meaning(vault):
    from acpmem.write.remember import remember

    mine, _ = remember(vault, "Deploys go out on Tuesdays, and a Friday deploy needs a second reviewer.",
                       type="decision")
    p = import_source(vault, str(FIX / "codex" / "AGENTS.md"))
    (dup,) = [i for i in p.items if i.action == "duplicate"]
    assert dup.match == mine.id and dup.candidate.text.startswith("Deploys go out on Tuesdays")
    assert len(_live(vault)) == 3


def test_a_contradiction_is_left_out_unless_asked_to_supersede(vault, tmp_path):
    from acpmem.write.remember import remember

    mine, _ = remember(vault, "Deploys go out on Tuesdays; Friday deploys need a second reviewer.", type="fact")
    f = tmp_path / "AGENTS.md"
    f.write_text("## Project notes\n\n- Deploys go out on Tuesdays; Friday deploys never need a second reviewer.\n")
    p = plan(vault, str(f))
    assert [(i.action, i.match) for i in p.items] == [("contradiction", mine.id)]
    done = import_source(vault, str(f), supersede_contradicted=True)
    assert [(i.action, i.match) for i in done.items] == [("update", mine.id)]
    assert mine.id not in _live(vault)


def test_a_secret_is_skipped_and_the_rest_imported(vault, tmp_path):
    f = tmp_path / "CLAUDE.md"
    f.write_text("## Notes\n\n- The staging database is reached through the bastion host in eu-west-1.\n"
                 "- The deploy bot logs in with AKIAIOSFODNN7EXAMPLE and the matching secret key.\n")
    p = import_source(vault, str(f))
    assert [i.action for i in p.items] == ["new", "skipped"] and "secret" in p.items[1].why
    assert all("AKIA" not in e.body for e in _live(vault).values())


def test_an_exported_block_is_never_imported_back(vault, tmp_path):
    import_source(vault, str(FIX / "codex" / "AGENTS.md"))
    target = _copy("claude-code/CLAUDE.md", tmp_path)
    export(vault, "claude-code", file=str(target))
    p = plan(vault, str(target))
    assert not any("Project memory (acpmem)" in i.candidate.section for i in p.items)
    assert p.counts()["new"] == 8


# --------------------------------------------------------------------------------------------- bad input

def _error(cli, vault, *args):
    head = _head(vault)
    r = cli("memory", "--vault", str(vault.root), "import", *args)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("Error: "), r
    assert _head(vault) == head
    return r.stderr


def test_bad_sources_are_one_line_and_nothing_is_imported(vault, cli, tmp_path):
    assert "does not exist" in _error(cli, vault, str(tmp_path / "nope.md"))
    long_name = _error(cli, vault, str(tmp_path / ("x" * 300)))   # was an internal error from the existence check
    assert "File name too long" in long_name and "internal error" not in long_name, long_name
    notes = tmp_path / "notes.txt"
    notes.write_text("some words about nothing in particular\n")
    assert "cannot tell the format" in _error(cli, vault, str(notes))
    big = tmp_path / "CLAUDE.md"
    big.write_text("- a line that is long enough to count as a memory\n" * 90_000)
    assert "too large" in _error(cli, vault, str(big))
    binary = tmp_path / "bin" / "AGENTS.md"
    binary.parent.mkdir()
    binary.write_bytes(b"# notes\n\x00\x01\x02 binary")
    assert "binary" in _error(cli, vault, str(binary))
    latin = tmp_path / "latin" / "GEMINI.md"
    latin.parent.mkdir()
    latin.write_bytes("- caf\xe9 au lait is served at nine every morning\n".encode("latin-1"))
    assert "not UTF-8" in _error(cli, vault, str(latin))
    r = cli("memory", "--vault", str(vault.root), "import", str(notes), "--format", "nonsense")
    assert r.returncode == 2


def test_dry_run_writes_nothing_and_the_plan_says_why(vault, cli):
    head = _head(vault)
    r = cli("memory", "--vault", str(vault.root), "import", str(FIX / "claude-code" / "CLAUDE.md"), "--dry-run")
    assert r.returncode == 0 and _head(vault) == head
    assert "Plan for" in r.stdout and "Nothing was written" in r.stdout
    assert "an instruction for running the project (a command under 'Commands')" in r.stdout


# --------------------------------------------------------------------------------------------- export

def test_export_writes_between_markers_idempotently_and_keeps_the_rest(vault, tmp_path):
    import_source(vault, str(FIX / "claude-code" / "memory"))
    target = _copy("claude-code/CLAUDE.md", tmp_path)
    original = target.read_bytes()
    got = export(vault, "claude-code", file=str(target))
    text = target.read_text()
    assert got.changed and text.startswith(original.decode()) and text.count(BEGIN_MARK) == 1
    assert "Integration tests run against a real Postgres" in text
    again = export(vault, "claude-code", file=str(target))
    assert not again.changed and target.read_text() == text
    # a person edits around the block; a new entry is exported: only the block changes
    head, _, rest = text.partition(BEGIN_MARK)
    block, _, tail = rest.partition(END_MARK)
    target.write_text("# Edited title\n" + head + BEGIN_MARK + block + END_MARK + tail + "\nA person's last line.\n")
    from acpmem.write.remember import remember

    remember(vault, "Release notes are written by the person who merges the last pull request.", importance=9)
    export(vault, "claude-code", file=str(target))
    new = target.read_text()
    assert new.startswith("# Edited title\n" + head + BEGIN_MARK) and new.endswith(END_MARK + tail +
                                                                                  "\nA person's last line.\n")
    assert "Release notes are written" in new.partition(BEGIN_MARK)[2].partition(END_MARK)[0]


def test_export_to_each_harness_uses_its_own_file_and_chosen_ids(tmp_path, clock):
    import random

    from acpmem.vault.create import init_vault

    proj = tmp_path / "proj"
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    v = init_vault(proj / ".acp-memory", clock=clock, rng=random.Random(3))
    try:
        p = import_source(v, str(FIX / "codex" / "AGENTS.md"))
        ids = [i.id for i in p.items if i.id]
        for target, name in (("claude-code", "CLAUDE.md"), ("codex", "AGENTS.md"), ("gemini", "GEMINI.md")):
            got = export(v, target, ids=[ids[0]])
            assert Path(got.path) == proj / name and got.ids == (ids[0],)
            assert (proj / name).read_text().startswith(BEGIN_MARK)
        assert export(v, "agents-md").ids and not export(v, "agents-md").changed
    finally:
        v.close()


def test_export_refuses_broken_markers_and_leaves_the_file(vault, tmp_path):
    from acpmem.core.errors import AcpmemError

    f = tmp_path / "GEMINI.md"
    f.write_text(f"intro\n{END_MARK}\nmiddle\n{BEGIN_MARK}\n")
    before = f.read_bytes()
    with pytest.raises(AcpmemError, match="not one pair in order"):
        export(vault, "gemini", file=str(f))
    assert f.read_bytes() == before


def test_export_and_import_json_validate(vault, cli, tmp_path):
    import json

    from acpmem.cli.schemas import schema
    import jsonschema

    r = cli("memory", "--vault", str(vault.root), "import", str(FIX / "claude-code" / "memory"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.Draft202012Validator(schema("import")).validate(doc)
    assert doc["commit"] and doc["counts"]["new"] == 4
    r = cli("memory", "--vault", str(vault.root), "export", "--to", "codex", "--file", str(tmp_path / "AGENTS.md"),
            "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.Draft202012Validator(schema("export")).validate(doc)
    assert doc["entries"] == 4 and doc["changed"] is True
    two = doc["ids"][:2]
    r = cli("memory", "--vault", str(vault.root), "export", "--to", "gemini", "--file", str(tmp_path / "GEMINI.md"),
            "--ids", ",".join(two), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ids"] == two, r.stderr


def test_a_piece_left_out_stays_out_on_a_re_run_and_never_updates_its_neighbour(vault, tmp_path):
    """A duplicate that was not imported is not the changed text of the other piece of its section (that piece is
    still in the source, unchanged)."""
    from acpmem.write.remember import remember

    for text in ("The billing service stores invoices in Postgres.", "Search uses SQLite FTS5 with a porter "
                 "tokenizer.", "The on-call rota changes every Monday morning."):
        remember(vault, text)
    mine, _ = remember(vault, "Deploys go out on Tuesdays; Friday deploys need a second reviewer.", type="fact")
    f = tmp_path / "AGENTS.md"
    f.write_text("## Project notes\n\n- Friday deploys go out only from the release branch.\n"
                 "- Hotfix deploys go out only from the release branch after the build is green.\n")
    first = import_source(vault, str(f))
    assert [(i.action, i.match) for i in first.items] == [("duplicate", mine.id), ("new", None)]
    head = _head(vault)
    again = import_source(vault, str(f))
    assert [i.action for i in again.items] == ["duplicate", "unchanged"] and _head(vault) == head


def test_claude_code_and_codex_read_the_exported_block_on_their_next_session():
    """tests/fixtures/import/harness-reads/ (make.sh): the files `acp memory export` wrote, and the request the real
    Claude Code 2.1.197 and Codex 0.171.0 sent to their model in the next session — the block is in it."""
    from acpmem.core.entry import Entry
    from acpmem.upkeep.exporting import render_block

    here = FIX / "harness-reads"
    for name, request in (("CLAUDE.md", "claude-code-request.txt"), ("AGENTS.md", "codex-request.txt")):
        exported = (here / name).read_text()
        block = exported.partition(BEGIN_MARK)[2].partition(END_MARK)[0].strip()
        sent = (here / request).read_text()
        assert block and block in sent, name
        assert "- **The staging cluster is called zebra-7 and lives in eu-west-1.** (fact, importance 8," in sent
    # and today's export renders that same block for that entry
    ident = (here / "CLAUDE.md").read_text().split("importance 8, #")[1].split(")")[0]
    e = Entry(id=ident, title="The staging cluster is called zebra-7 and lives in eu-west-1.", type="fact",
              importance=8, created="2026-12-04T14:10:00Z",
              body="The staging cluster is called zebra-7 and lives in eu-west-1.\n")
    assert BEGIN_MARK + (here / "CLAUDE.md").read_text().partition(BEGIN_MARK)[2] == render_block([e], 1)


def test_a_project_folder_imports_every_known_file_at_once(vault, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(FIX / "claude-code" / "CLAUDE.md", proj / "CLAUDE.md")
    shutil.copy(FIX / "codex" / "AGENTS.md", proj / "AGENTS.md")
    shutil.copytree(FIX / "cursor" / ".cursor", proj / ".cursor")
    shutil.copytree(FIX / "cline" / "memory-bank", proj / "memory-bank")
    p = import_source(vault, str(proj))
    assert p.format == "agents-md,claude-md,cline,cursor" and len(p.files) == 5
    by_format = {}
    for e in _live(vault).values():
        by_format[e.source["format"]] = by_format.get(e.source["format"], 0) + 1
    assert by_format == {"claude-md": 8, "agents-md": 3, "cursor": 2, "cline": 5}
    assert import_source(vault, str(proj)).commit is None


def test_claude_codes_own_folders_are_named_from_home_and_user_level_rules_are_preferences(vault, tmp_path):
    from acpmem.read.retrieval import recall

    home = Path.home()
    mem = home / ".claude" / "projects" / "-work-acme" / "memory"
    shutil.copytree(FIX / "claude-code" / "memory", mem)
    (home / ".claude" / "CLAUDE.md").write_text("## Preferences\n\n- Never use emoji in commit messages or code "
                                                "comments.\n")
    import_source(vault, str(mem))
    import_source(vault, str(home / ".claude" / "CLAUDE.md"))
    files = {e.source["file"] for e in _live(vault).values()}
    assert "~/.claude/projects/-work-acme/memory/feedback_no_mocks.md" in files and "~/.claude/CLAUDE.md" in files
    (pref,) = [e for e in _live(vault).values() if e.source["file"] == "~/.claude/CLAUDE.md"]
    assert pref.type == "user-preference"
    assert recall(vault, "emoji commit messages")[0].entry.id == pref.id


def test_format_can_be_forced_and_rules_json_may_be_a_plain_list(vault, tmp_path):
    notes = tmp_path / "decisions.txt"
    notes.write_text("## Decisions\n\n- We chose Postgres over MySQL because the team runs it elsewhere.\n")
    p = plan(vault, str(notes), "markdown")
    assert [(i.action, i.candidate.type) for i in p.items] == [("new", "decision")]
    rules = tmp_path / "rules.json"
    rules.write_text('["Always answer with the command first.", "Never run migrations on Fridays."]')
    p = plan(vault, str(rules))
    assert p.format == "claude-recall" and [i.candidate.key for i in p.items] == ["rule1", "rule2"]


def test_files_made_from_claude_codes_own_memory_template_import_with_their_types(vault, tmp_path):
    """The template in the prompt Claude Code 2.1.197 really sent (fixtures/import/claude-code/memory-prompt.txt),
    filled for each type, with the MEMORY.md line the same prompt asks for."""
    import re

    prompt = (FIX / "claude-code" / "memory-prompt.txt").read_text()
    template = re.search(r"```markdown\n(.*?)```", prompt, re.S).group(1)
    index_line = re.search(r"pointer in `MEMORY.md` \(`(.*?)`\)", prompt).group(1)
    assert "~" not in index_line and index_line.startswith("- [Title](file.md)")
    folder = tmp_path / "-work-acme" / "memory"
    folder.mkdir(parents=True)
    index = []
    facts = {"user": "Maria leads the payments team and reads answers on her phone.",
             "feedback": "Keep pull requests under 400 lines; reviewers asked for it twice.",
             "project": "The checkout rewrite ships on 2027-03-01 behind the new-cart flag.",
             "reference": "Incidents go to https://tracker.example.invalid/ops with the runbook linked."}
    for kind in facts:
        text = (template.replace("<short-kebab-case-slug>", f"{kind}-fact")
                .replace("<one-line summary — used to decide relevance during recall>", f"The {kind} memory of Acme")
                .replace("user | feedback | project | reference", kind))
        text = re.sub(r"<the fact;[^>]*>", facts[kind], text)
        (folder / f"{kind}_fact.md").write_text(text)
        index.append(index_line.replace("Title", f"The {kind} memory").replace("file.md", f"{kind}_fact.md")
                     .replace("hook", "why it matters"))
    (folder / "MEMORY.md").write_text("\n".join(index) + "\n")
    p = import_source(vault, str(folder))
    assert p.format == "claude-memory" and p.counts()["skipped"] == 4 and p.counts()["new"] == 4
    got = {e.title: (e.type, e.importance) for e in _live(vault).values()}
    assert got == {"The user memory of Acme": ("user-preference", 7), "The feedback memory of Acme": ("lesson", 7),
                   "The project memory of Acme": ("fact", 6), "The reference memory of Acme": ("reference", 5)}


def test_the_codex_memories_fixture_keeps_to_the_shape_codex_ships(vault, tmp_path):
    prompt = (FIX / "codex" / "memories-prompt.txt").read_text()
    ours = (FIX / "codex" / "memories" / "MEMORY.md").read_text()
    for head in ("# Task Group:", "scope:", "applies_to:", "## Task 1:", "### rollout_summary_files", "### keywords",
                 "## User preferences", "## Reusable knowledge", "## Failures and how to do differently"):
        assert head in prompt and head in ours, head
    # the template's own body shape (from "## Task 1:" on), read as a MEMORY.md: the bullets of its three
    # consolidated sections become memories (three, two, two); the task routing is skipped
    template = "# Task Group: the template\n" + prompt[prompt.index("## Task 1:"):]
    f = tmp_path / "memories" / "MEMORY.md"
    f.parent.mkdir()
    f.write_text(template)
    p = plan(vault, str(f))
    assert p.format == "codex-memories"
    assert sorted(i.candidate.type for i in p.items if i.action == "new") == \
        ["fact", "fact", "lesson", "lesson", "user-preference", "user-preference", "user-preference"]


def test_a_source_that_is_a_link_is_read_through_it_and_a_fifo_is_refused(vault, cli, tmp_path):
    import os

    link = tmp_path / "linked" / "AGENTS.md"
    link.parent.mkdir()
    link.symlink_to(FIX / "codex" / "AGENTS.md")
    assert plan(vault, str(link)).counts()["new"] == 3
    fifo = tmp_path / "fifo" / "CLAUDE.md"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    assert "not a regular file" in _error(cli, vault, str(fifo))


def test_export_into_a_folder_that_does_not_exist_is_refused_and_makes_no_folder(vault, tmp_path):
    from acpmem.core.errors import AcpmemError

    target = tmp_path / "missing" / "AGENTS.md"
    with pytest.raises(AcpmemError, match="does not exist"):
        export(vault, "codex", file=str(target))
    assert not target.parent.exists()
