"""The documented JSON: every command's --json output validates against the schema shipped in the package
(``acp memory schema``), and every failure under --json is one error object on stderr with the exit code of the
rule (2 usage, 1 content, 130 interrupted) — real processes on a real vault."""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from acpmem.cli.schemas import NAMES, schema

FIXTURES = Path(__file__).parent / "fixtures"
DSH_LOG = FIXTURES / "hosts" / "dsh" / "dsh-session1.jsonl.zstd"
CHAT = FIXTURES / "transcripts" / "openai_chat.json"


def _check(name: str, doc) -> None:
    s = schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
              for e in jsonschema.Draft202012Validator(s).iter_errors(doc)]
    assert not errors, (name, errors)


def _json(r: subprocess.CompletedProcess):
    assert r.returncode == 0, (r.args, r.stderr)
    return json.loads(r.stdout)


def test_every_schema_file_is_shipped_and_valid(cli):
    r = cli("memory", "schema", "--json")
    listed = _json(r)
    _check("schema", listed)
    assert [s["name"] for s in listed["schemas"]] == list(NAMES)
    for name in NAMES:
        printed = cli("memory", "schema", name)
        assert printed.returncode == 0 and json.loads(printed.stdout) == schema(name)
        jsonschema.Draft202012Validator.check_schema(schema(name))
        assert schema(name)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_schemas_are_package_data_of_the_wheel():
    """CI installs the wheel, not the source tree: the schema files must be in what setuptools packs."""
    import tomllib

    repo = Path(__file__).resolve().parents[1]
    data = tomllib.loads((repo / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["package-data"]["acpmem"]
    files = sorted(p.relative_to(repo / "acpmem").as_posix() for p in (repo / "acpmem" / "data" / "schemas").glob("*"))
    assert files == sorted(f"data/schemas/{n}.json" for n in NAMES)
    import fnmatch

    assert all(any(fnmatch.fnmatch(f, pat) for pat in data) for f in files), data


def test_every_command_json_output_validates_against_its_schema(example_vault, cli, tmp_path):
    v = str(example_vault.root)
    seen: set[str] = set()

    def check(name, *args, **kw):
        doc = _json(cli("memory", "--vault", v, *args, **kw))
        _check(name, doc)
        seen.add(name)
        return doc

    ids = [e["id"] for e in check("list", "list", "--json")["entries"]]
    assert len(ids) == 10
    check("list", "list", "--format", "json", "--all")
    shown = check("show", "show", ids[0], "--json")
    assert shown["id"] == ids[0]
    check("show", "show", ids[0], "--source", "--json")
    check("score", "score", "--json", "--seed", "7")
    check("log", "log", "--json")
    check("log", "log", ids[0], "--json")
    check("doctor", "doctor", "--json")
    assert check("recall", "recall", "upload", "--json")["hits"]
    check("surface", "surface", "--session", "s-json", "--json")
    check("stats", "stats", "--json")
    check("review", "review", "--json")
    check("consolidate", "consolidate", "--dry-run", "--json")
    for fmt in ("openai", "anthropic", "mcp", "dsh"):
        for who in ("main", "fork"):
            check("tools", "tools", "--format", fmt, "--for", who)
    check("blocks", "blocks", str(DSH_LOG), "--json")
    check("blocks", "blocks", str(CHAT), "--json")
    made = check("remember", "remember", "Schemas are checked against real output.", "--json")
    check("forget", "forget", made["id"], "--reason", "a test entry", "--json")
    decided = check("review", "review", "accept", ids[1], "--json")
    assert decided["decisions"][0]["decision"] == "accept"
    ack = check("commit", "commit", "--type", "fact", "--note", "the queue is sqlite", "--importance", "4",
                "--session", "s-json", "--seq", "1", "--transcript", str(CHAT), "--extractor", "offline", "--wait",
                "--json")
    assert ack["outcome"]["status"]
    check("commit", "commit", "--type", "fact", "--note", "later", "--importance", "4", "--session", "s-json",
          "--seq", "2", "--transcript", str(CHAT), "--extractor", "offline", "--json")
    check("extract", "extract", "--pending", "--extractor", "offline", "--json")
    check("extract", "extract", "--transcript", str(CHAT), "--note", "what the chat says", "--type", "fact",
          "--importance", "3", "--session", "s-dry", "--seq", "1", "--extractor", "offline", "--dry-run")
    # sync with a real bare remote
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", v, "remote", "add", "origin", str(bare)], check=True)
    check("sync", "sync", "--json")
    check("init", "init", str(tmp_path / "another"), "--json", cwd=tmp_path)
    check("stale", "stale", "--json")
    imported = check("import", "import", str(FIXTURES / "import" / "codex" / "AGENTS.md"), "--json")
    assert imported["counts"]["new"] == 3
    check("import", "import", str(FIXTURES / "import" / "codex" / "AGENTS.md"), "--dry-run", "--json")
    check("export", "export", "--to", "codex", "--file", str(tmp_path / "AGENTS.md"), "--json")
    # embed: in test_progress (a model server); diff: needs a project (below)
    assert seen == set(NAMES) - {"schema", "error", "warning", "embed", "diff"}


def test_the_branch_commands_json_validates_against_its_schema(tmp_path, cli):
    """diff, list's hidden count, review --branches and review keep|drop, on a real project with a branch."""
    proj = tmp_path / "proj"
    subprocess.run(["git", "init", "-q", "-b", "main", str(proj)], check=True)

    def git(*args):
        subprocess.run(["git", "-C", str(proj), *args], check=True, capture_output=True)

    def check(name, *args):
        doc = _json(cli("memory", *args, "--json", cwd=proj))
        _check(name, doc)
        return doc

    (proj / "a.py").write_text("a = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "a")
    assert cli("memory", "init", cwd=proj).returncode == 0
    git("checkout", "-qb", "feature")
    (proj / "b.py").write_text("b = 1\n")
    git("add", "b.py")
    git("commit", "-qm", "b")
    made = check("remember", "remember", "Module b is new", "--type", "fact")
    other = check("remember", "remember", "Module b is tested by hand", "--type", "lesson")
    assert made["branch"] == "feature"
    git("checkout", "-q", "main")
    assert check("diff", "diff", "main..feature")["entries"][0]["id"] in (made["id"], other["id"])
    assert check("list", "list")["hidden"]["count"] == 2
    git("branch", "-D", "feature")
    assert len(check("review", "review", "--branches")["orphans"]) == 2
    assert check("review", "review", "keep", made["id"], "--global")["decisions"][0]["decision"] == "keep"
    assert check("review", "review", "drop", other["id"])["decisions"][0]["decision"] == "drop"


# --------------------------------------------------------------------------------------------- errors

def _editor(tmp_path: Path, script: str) -> str:
    p = tmp_path / "editor.sh"
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def _error_cases(v: str, first: str, tmp_path: Path) -> list[tuple[int, str, list[str]]]:
    """(exit code, error code, the command line) for a failure of every command."""
    big = "x " * 5000   # over [extraction] max_entry_bytes (8,192)
    return [
        # usage: the command line cannot be right whatever the vault holds
        (2, "usage", ["list", "--json", "--format", "prompt"]),
        (2, "usage", ["list", "--json", "--budget", "0"]),
        (2, "usage", ["recall", "--json"]),
        (2, "usage", ["recall", "x", "--limit", "0", "--json"]),
        (2, "usage", ["show", "", "--json"]),
        (2, "usage", ["log", "", "--json"]),
        (2, "usage", ["score", "--top", "-1", "--json"]),
        (2, "usage", ["score", "--at", "not a time", "--json"]),
        (2, "usage", ["surface", "--json"]),
        (2, "usage", ["commit", "--json"]),
        (2, "usage", ["extract", "--json"]),
        (2, "usage", ["remember", "x", "--importance", "11", "--json"]),
        (2, "usage", ["remember", "- text", "--json"]),
        (2, "usage", ["forget", first, "--reason", " ", "--json"]),
        (2, "usage", ["review", "maybe", "--json"]),
        (2, "usage", ["doctor", "--bogus", "--json"]),
        (2, "usage", ["stats", "--bogus", "--json"]),
        (2, "usage", ["consolidate", "--bogus", "--json"]),
        (2, "usage", ["sync", "--bogus", "--json"]),
        (2, "usage", ["blocks", "--json"]),
        (2, "usage", ["init", "--user", "somewhere", "--json"]),
        (2, "usage", ["schema", "nope", "--json"]),
        (2, "usage", ["edit", first, "--json"]),
        # content: well-formed, refused by this vault or this content
        (1, "refused", ["recall", "x", "--type", "nosuchtype", "--json"]),
        (1, "refused", ["remember", "x", "--type", "FACT", "--json"]),
        (1, "refused", ["remember", big, "--type", "fact", "--json"]),
        (1, "refused", ["remember", f"see {v}/entries/notes.md", "--user", "--json"]),
        (1, "refused", ["consolidate", "--type", "nosuchtype", "--json"]),
        (1, "invalid_entry", ["commit", "--type", "bogus", "--note", "n", "--importance", "3", "--session", "s",
                              "--seq", "1", "--json"]),
        (1, "not_found", ["show", "zzzzzz", "--json"]),
        (1, "not_found", ["log", "zzzzzz", "--json"]),
        (1, "not_found", ["forget", "zzzzzz", "--reason", "r", "--json"]),
        (1, "not_found", ["review", "accept", "zzzzzz", "--json"]),
        (1, "not_found", ["extract", "r-zzzzzzzz", "--dry-run", "--json"]),
        (1, "transcript", ["show", first, "--source", "--transcript", "/dev/zero", "--json"]),
        (1, "transcript", ["blocks", str(tmp_path / "none.jsonl"), "--json"]),
        (1, "transcript", ["extract", "--transcript", str(CHAT), "--note", "n", "--type", "fact", "--importance", "3",
                        "--session", "s", "--seq", "1", "--host-tools", str(tmp_path / "none.json"), "--dry-run",
                        "--json"]),
        (1, "transcript", ["commit", "--type", "fact", "--note", "n", "--importance", "3", "--session", "s", "--seq",
                           "1", "--transcript", str(CHAT), "--host-tools", str(tmp_path / "none.json"), "--json"]),
        (1, "refused", ["commit", "--type", "fact", "--note", "n", "--importance", "3", "--session", "s", "--seq",
                        "1", "--transcript", str(CHAT), "--host-tools", str(CHAT), "--json"]),
        (1, "vault_exists", ["init", v, "--json"]),
        (1, "git_state", ["sync", "--json"]),
        (1, "settings", ["embed", "--json"]),
    ]


def test_every_failure_under_json_is_one_error_object_with_the_rule_s_exit_code(example_vault, cli, tmp_path):
    v = str(example_vault.root)
    first = sorted(e.id for e in example_vault.load().entries)[0]
    assert cli("memory", "init", "--user").returncode == 0   # for remember --user
    for want_exit, code, args in _error_cases(v, first, tmp_path):
        for env in ({}, {"ACPMEM_NO_FASTPATH": "1"}):   # the per-turn commands' fast path and typer alike
            r = cli("memory", "--vault", v, *args, env=env, cwd=tmp_path)
            lines = r.stderr.splitlines()
            assert r.returncode == want_exit and len(lines) == 1 and r.stdout == "", (args, r.returncode, r.stderr)
            doc = json.loads(lines[0])
            _check("error", doc)
            assert doc["error"]["code"] == code and doc["error"]["exit"] == want_exit, (args, doc)
            assert doc["error"]["message"] and "Value error" not in doc["error"]["message"]
        # the same failure without --json: one `Error: …` line, the same exit code
        plain = [a for a in args if a != "--json"]
        if plain != args and args[:4] != ["list", "--json", "--format", "prompt"] and args[0] != "edit":
            r = cli("memory", "--vault", v, *plain, cwd=tmp_path, input="")
            assert r.returncode == want_exit and r.stderr.startswith("Error: ") and \
                len(r.stderr.splitlines()) == 1, (plain, r.stderr)


def test_a_vault_that_is_not_there_is_the_same_error_for_every_command(tmp_path, cli):
    nowhere = str(tmp_path / "nowhere")
    for args in (["list"], ["recall", "x"], ["show", "k3f"], ["score"], ["log"], ["doctor"], ["stats"],
                 ["surface", "--session", "s"], ["review"], ["consolidate"], ["sync"], ["forget", "k3f", "-r", "x"],
                 ["remember", "x"], ["commit", "--type", "fact", "--note", "n", "--importance", "3", "--session",
                                     "s", "--seq", "1"]):
        r = cli("memory", "--vault", nowhere, *args, "--json", cwd=tmp_path)
        assert r.returncode == 1 and r.stdout == "", (args, r.stderr)
        doc = json.loads(r.stderr)
        _check("error", doc)
        assert doc["error"]["code"] == "vault_not_found" and "acp memory init" in doc["error"]["hint"]


def test_a_failure_after_output_and_warnings_stays_json(example_vault, cli):
    """doctor prints its report and then fails; a broken entry file is a warning for list: every stderr line is a
    JSON object (warnings as {"warning": …})."""
    v = example_vault
    (v.root / "entries" / "broken.md").write_text("---\nid: [\n---\n")
    r = cli("memory", "--vault", str(v.root), "doctor", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["ok"] is False
    (line,) = r.stderr.splitlines()
    doc = json.loads(line)
    _check("error", doc)
    assert doc["error"]["code"] == "problems_found"
    r = cli("memory", "--vault", str(v.root), "list", "--json")
    assert r.returncode == 0 and r.stderr.splitlines(), r.stderr
    for line in r.stderr.splitlines():
        _check("warning", json.loads(line))
    _check("list", json.loads(r.stdout))


@pytest.mark.real_process("a SIGINT to the command's process")
def test_interrupted_under_json_is_the_error_object_and_exit_130(example_vault, cli, tmp_path):
    """Ctrl-C while the editor of `remember --edit` runs (the editor sends SIGINT to acp itself: no timing)."""
    # it stays open after the signal (acp kills it when interrupted): acp is still waiting on it when it is told
    editor = _editor(tmp_path, 'kill -INT "$PPID"\nexec sleep 60 </dev/null >/dev/null 2>&1\n')
    head = subprocess.run(["git", "-C", str(example_vault.root), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout
    r = cli("memory", "--vault", str(example_vault.root), "remember", "--edit", "--json", env={"EDITOR": editor})
    assert r.returncode == 130, r.stderr
    doc = json.loads(r.stderr)
    _check("error", doc)
    assert doc["error"]["code"] == "interrupted" and doc["error"]["exit"] == 130
    r = cli("memory", "--vault", str(example_vault.root), "remember", "--edit", env={"EDITOR": editor})
    assert r.returncode == 130 and r.stderr == "Interrupted.\n"
    assert subprocess.run(["git", "-C", str(example_vault.root), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout == head


def test_the_error_object_keeps_what_the_error_names():
    from acpmem.core.errors import AmbiguousId

    doc = AmbiguousId("ab", ["ab1111", "ab2222"]).to_json()
    _check("error", doc)
    assert doc["error"]["details"] == {"matches": ["ab1111", "ab2222"]} and doc["error"]["exit"] == 1


def test_the_console_script_and_python_m_agree_on_the_error_object(example_vault):
    args = ["show", "zzzzzz", "--json", "--vault", str(example_vault.root)]
    a = subprocess.run([sys.executable, "-m", "acpmem", *args], capture_output=True, text=True)
    b = subprocess.run([str(Path(sys.executable).parent / "acpmem"), *args], capture_output=True, text=True)
    assert a.returncode == b.returncode == 1 and a.stderr == b.stderr
    _check("error", json.loads(a.stderr))


@pytest.mark.parametrize("name", [n for n in NAMES])
def test_each_schema_has_a_title_naming_what_it_describes(name):
    assert schema(name)["title"] and schema(name)["$id"] == f"acpmem:schema/{name}"
