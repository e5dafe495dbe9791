"""The small defects a new user's trial found (issue 26), each held by a test: real processes on real vaults."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_proc import git_out, make_entry, warnings_said


def _editor(tmp_path: Path, script: str) -> str:
    p = tmp_path / "editor.sh"
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def _put(v, ident: str, title: str, body: str = "- x") -> None:
    e = make_entry(ident, title, body)
    v.write_entries([e.with_changes(path=v.path_for(ident, title))], subject="put", why="test")


def test_remember_defaults_type_and_importance(vault, cli):
    r = cli("memory", "--vault", str(vault.root), "remember", "Releases are cut on Mondays.", "--json")
    assert r.returncode == 0, r.stderr
    e = vault.resolve(json.loads(r.stdout)["id"])
    assert (e.type, e.importance) == ("fact", 5)
    assert cli("memory", "init", "--user").returncode == 0
    r = cli("memory", "--vault", str(vault.root), "remember", "Answer briefly.", "--user", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    shown = json.loads(cli("memory", "--vault", str(vault.root), "show", d["id"], "--json").stdout)
    assert (d["layer"], shown["type"], shown["importance"]) == ("user", "user-preference", 5)
    help_text = cli("memory", "remember", "--help").stdout
    assert "Default: 5" in help_text and "required" not in help_text.lower()


def test_usage_errors_have_no_pydantic_wording(example_vault, cli):
    for args in (["list", "--format", "yaml"], ["tools", "--for", "x"], ["recall", "x", "--limit", "abc"]):
        r = cli("memory", "--vault", str(example_vault.root), *args)
        assert r.returncode == 2 and r.stderr.startswith("Error: "), r.stderr
        assert "Value error" not in r.stderr and "Input should" not in r.stderr and "unable to parse" not in r.stderr
    r = cli("memory", "--vault", str(example_vault.root), "list", "--format", "yaml")
    assert "'yaml' is not one of 'table', 'json', 'prompt', 'markdown'" in r.stderr


def test_log_of_an_unknown_id_does_not_advise_log_id(example_vault, cli):
    r = cli("memory", "--vault", str(example_vault.root), "log", "nosuch")
    assert r.returncode == 1 and r.stderr.startswith("Error: no entry with id 'nosuch'"), r.stderr
    assert "acp memory log ID" not in r.stderr and "`acp memory log` without an id" in r.stderr


def test_log_of_an_empty_id_is_an_error_like_show(example_vault, cli):
    v = str(example_vault.root)
    for cmd in ("show", "log"):
        r = cli("memory", "--vault", v, cmd, "")
        assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith("Error: no entry id given"), (cmd, r)
    assert cli("memory", "--vault", v, "log").stdout.count("\n") >= 2   # without an id: the whole log


def test_an_invalid_hand_edit_names_its_path_once(example_vault, cli):
    v = example_vault
    e = sorted(v.load().entries, key=lambda e: e.id)[0]
    p = v.root / e.path
    p.write_text(p.read_text("utf-8").replace(f"importance: {e.importance}", "importance: eleven"), "utf-8")
    r = cli("memory", "--vault", str(v.root), "remember", "Something else", "--json")
    assert r.returncode == 0, r.stderr
    said = [w for w in warnings_said(r.stderr) if "not committed" in w]
    assert len(said) == 1 and said[0].count(e.path) == 1 and "field 'importance'" in said[0], said


def test_remember_edit_opens_a_template_that_is_dropped(vault, cli, tmp_path):
    seen = tmp_path / "draft.txt"
    editor = _editor(tmp_path, f'cp "$1" "{seen}"\nprintf "Deploy freeze in December\\n- from the 15th\\n" >> "$1"\n')
    r = cli("memory", "--vault", str(vault.root), "remember", "--edit", "--type", "decision", "--json",
            env={"EDITOR": editor})
    assert r.returncode == 0, r.stderr
    draft = seen.read_text("utf-8")
    assert draft.startswith("<!-- acpmem remember:") and "Type: decision; importance: 5" in draft
    e = vault.resolve(json.loads(r.stdout)["id"])
    assert e.title == "Deploy freeze in December" and e.body == "Deploy freeze in December\n- from the 15th\n"
    # saved untouched (only the template): nothing is written
    head = git_out(vault.root, "rev-parse", "HEAD")
    r = cli("memory", "--vault", str(vault.root), "remember", "--edit", env={"EDITOR": _editor(tmp_path, "exit 0\n")})
    assert r.returncode == 2 and r.stderr.startswith("Error: nothing to remember"), r.stderr
    assert git_out(vault.root, "rev-parse", "HEAD") == head


def test_text_starting_with_a_dash_gets_a_hint_about_double_dash(vault, cli):
    r = cli("memory", "--vault", str(vault.root), "remember", "- a bullet first")
    assert r.returncode == 2 and "after `--`" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    r = cli("memory", "--vault", str(vault.root), "remember", "--type", "fact", "--json", "--", "- a bullet first")
    assert r.returncode == 0, r.stderr
    assert vault.resolve(json.loads(r.stdout)["id"]).body.startswith("- a bullet first")
    # a mistyped long option gets no such hint: it is not text
    r = cli("memory", "--vault", str(vault.root), "remember", "x", "--tpye", "fact")
    assert r.returncode == 2 and "after `--`" not in r.stderr


@pytest.mark.parametrize("where", ["entries", "entries/deeper", "reads"])
def test_init_inside_a_vault_s_folders_is_refused(vault, cli, where):
    folder = vault.root / where
    folder.mkdir(parents=True, exist_ok=True)
    before = sorted(p.relative_to(vault.root).as_posix() for p in vault.root.rglob("*") if ".git/" not in p.as_posix())
    r = cli("memory", "init", cwd=folder)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"Error: {folder} is inside the vault at {vault.root}")
    r = cli("memory", "init", str(folder / "named"))
    assert r.returncode == 1 and "is inside the vault" in r.stderr
    after = sorted(p.relative_to(vault.root).as_posix() for p in vault.root.rglob("*") if ".git/" not in p.as_posix())
    assert after == before


def test_usage_lines_have_no_double_brackets(cli):
    from acpmem.cli.main import typer_command

    group = typer_command("acpmem")
    names = [n for n in group.commands if n != "hook"] + ["hook claude-code"]
    for name in names:
        r = cli("memory", *name.split(), "--help")
        usage = next(line for line in r.stdout.splitlines() if line.startswith("Usage:"))
        assert "[[" not in usage and "]]" not in usage, usage
    assert "Usage: acp memory init [OPTIONS] [PATH]" in cli("memory", "init", "--help").stdout


def test_show_source_with_a_transcript_that_cannot_be_read_fails(example_vault, cli, tmp_path):
    v = str(example_vault.root)
    first = sorted(e.id for e in example_vault.load().entries)[0]
    # (a name longer than a file system takes was an internal error: "File name too long" from the existence check)
    for bad in ("/dev/zero", str(tmp_path / "missing.jsonl"), str(tmp_path / ("x" * 300))):
        r = cli("memory", "--vault", v, "show", first, "--source", "--transcript", bad)
        assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith(f"Error: --transcript {bad}: "), r.stderr
        assert r.stderr.count(bad) == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "internal error" not in r.stderr
    # no --transcript and none recorded: a finding, not an error
    r = cli("memory", "--vault", v, "show", first, "--source")
    assert r.returncode == 0 and "not recorded" in r.stdout


def test_bidi_zero_width_and_control_characters_are_escaped_in_list_and_show_text(vault, cli):
    title = "Pay \u202eevil\u202c with a zero\u200bwidth"   # a title holds no control character; a body may
    _put(vault, "bidi01", title, "- body \u2066isolated\u2069 and \u200d and \x1b[31mred")
    v = str(vault.root)
    for args in (["list"], ["list", "--format", "markdown"], ["show", "bidi01"]):
        r = cli("memory", "--vault", v, *args)
        assert r.returncode == 0, r.stderr
        for ch in "\u202e\u202c\u200b\x1b\u2066\u2069\u200d":
            assert ch not in r.stdout, (args, ch)
        assert "Pay \\u202eevil\\u202c with a zero\\u200bwidth" in r.stdout, args
    shown = cli("memory", "--vault", v, "show", "bidi01").stdout
    assert "\\u2066isolated\\u2069" in shown and "\\u001b[31mred" in shown
    # JSON keeps the text as stored
    d = json.loads(cli("memory", "--vault", v, "show", "bidi01", "--json").stdout)
    assert d["title"] == title and "\u2066" in d["body"]


def test_one_entry_is_one_entry(vault, cli, tmp_path):
    _put(vault, "only01", "The only entry")
    r = cli("memory", "--vault", str(vault.root), "consolidate", "--dry-run")
    assert r.returncode == 0 and "among 1 live entry" in r.stdout and "1 live entries" not in r.stdout, r.stdout
    r = cli("memory", "--vault", str(vault.root), "list", "--format", "prompt")
    assert "(1 entry from earlier sessions" in r.stdout
    r = cli("memory", "init", str(tmp_path / "fresh"))
    assert "(0 entries)" in r.stdout


def test_a_content_that_is_not_text_says_so():
    from acpmem.core.errors import EntryInvalid
    from acpmem.core.tools import parse_commit_args, parse_write_args

    with pytest.raises(EntryInvalid) as info:
        parse_write_args({"content": 12345})
    assert "must be text, got int 12345" in info.value.message and "missing" not in info.value.message
    with pytest.raises(EntryInvalid) as info:
        parse_write_args({"content": "  "})
    assert "is missing or empty" in info.value.message
    with pytest.raises(EntryInvalid) as info:
        parse_commit_args({"type": "fact", "note": 42, "importance": 5})
    assert "field 'note' must be text, got int 42" in info.value.message


def test_serve_and_edit_help_describe_what_they_do(cli):
    serve = " ".join(cli("memory", "serve", "--help").stdout.split())
    assert "_meta" in serve and "acpmem/session" in serve and "memory://entry/{id}/source" in serve
    assert "to a memory_commit call's arguments" not in serve
    from acpmem.core.tools import tool_definitions

    (commit,) = [t for t in tool_definitions("main", "mcp", "en", ("fact",)) if t["name"] == "memory_commit"]
    assert commit["inputSchema"]["additionalProperties"] is False and "session" not in commit["inputSchema"][
        "properties"]
    edit = " ".join(cli("memory", "edit", "--help").stdout.split())
    assert "redacted" not in edit and "paths are refused" not in edit and "is refused" in edit
    assert ".acpmem/edit/" in edit and "kind `edit`" in edit


# --------------------------------------------------------------------------------------------- issue 34

BAD = "---\nid: {id}\ntitle: Bad\ntype: fact\nimportance: 99\ncreated: 2026-01-01T00:00:00Z\n---\nbody\n"
OSC52 = "\x1b]52;c;aGk=\x07"   # a terminal escape that writes the clipboard


def test_a_file_name_holding_terminal_escapes_is_quoted_in_list_and_doctor(vault, cli):
    name = f"esc001-{OSC52}.md"
    (vault.root / "entries" / name).write_text(BAD.format(id="esc001"))
    quoted = '"entries/esc001-\\033]52;c;aGk=\\a.md"'
    r = cli("memory", "--vault", str(vault.root), "list")
    assert "\x1b" not in r.stderr + r.stdout and "\x07" not in r.stderr + r.stdout
    assert f"Warning: skipped {quoted}: field 'importance' must be" in r.stderr, r.stderr
    r = cli("memory", "--vault", str(vault.root), "doctor")
    assert "\x1b" not in r.stdout + r.stderr and quoted in r.stdout, r.stdout


def test_list_warnings_are_capped_and_name_the_field(vault, cli):
    from acpmem.cli.hot import PROBLEMS_SHOWN

    for i in range(PROBLEMS_SHOWN + 7):
        (vault.root / "entries" / f"bad{i:03d}.md").write_text(BAD.format(id=f"bad{i:03d}"))
    r = cli("memory", "--vault", str(vault.root), "list")
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("Warning:")]
    assert len(said) == PROBLEMS_SHOWN + 1, r.stderr
    assert all("field 'importance' must be an integer from 1 to 10" in ln for ln in said[:-1])
    assert said[-1] == "Warning: … and 7 more invalid file(s): `acp memory doctor` lists them all"


def test_doctor_advice_for_an_untracked_bad_file_works(vault, cli):
    root = vault.root
    (root / "entries" / "bad001.md").write_text(BAD.format(id="bad001"))
    r = cli("memory", "--vault", str(root), "doctor")
    (line,) = [ln for ln in r.stdout.splitlines() if "bad001" in ln and ln.startswith("error    uncommitted")]
    fix = r.stdout.splitlines()[r.stdout.splitlines().index(line) + 1]
    assert "checkout --" not in fix, fix                      # git has no version of a new file to go back to
    command = fix.split("`")[1]
    assert command.endswith(" /tmp/")
    done = subprocess.run(command[:-len("/tmp/")] + f"{root.parent}/", shell=True, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    r = cli("memory", "--vault", str(root), "doctor")
    assert r.returncode == 0 and "bad001" not in r.stdout, r.stdout


def test_edit_with_no_editor_set_and_no_terminal_starts_no_editor(vault, cli, tmp_path):
    import os

    _put(vault, "ed0001", "An entry to edit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "started"
    for name in ("vi", "nano", "vim"):   # what acpmem would fall back to: each says it was started
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} >> {started}\n")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VISUAL", "EDITOR")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    r = subprocess.run([str(Path(sys.executable).parent / "acp"), "memory", "--vault", str(vault.root), "edit",
                        "ed0001"], input="", capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and not started.exists(), (r.stderr, started.exists())
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("Error: no editor is set") and "--from FILE" in line, line


NO_USER = "~nosuchuser1729"


@pytest.mark.parametrize("where", ["--vault", "ACPMEM_VAULT", "ACPMEM_USER_VAULT", "[layers] user_vault",
                                   "commit --transcript",
                                   "commit --host-tools", "init", "import", "export --file",
                                   "show --source --transcript"])
def test_a_path_under_the_home_of_no_user_is_one_line_and_nothing_is_made(example_vault, cli, tmp_path, where):
    """``~NAME/…`` where no user NAME exists (a typo, a path copied from another machine): one line naming where
    the path came from and the next step — pathlib's bare RuntimeError was an internal error — exit 1, nothing
    made (no folder named ``~NAME`` in the current one) and nothing recorded."""
    v = str(example_vault.root)
    bad = f"{NO_USER}/x"
    commit = ["commit", "--type", "fact", "--note", "A note.", "--importance", "4", "--session", "s1", "--seq", "2"]
    argv, env = {
        "--vault": (["--vault", bad, "list"], {}),
        "ACPMEM_VAULT": (["list"], {"ACPMEM_VAULT": bad}),
        "ACPMEM_USER_VAULT": (["--vault", v, "list"], {"ACPMEM_USER_VAULT": bad}),
        "[layers] user_vault": (["--vault", v, "list"], {}),
        "commit --transcript": (["--vault", v, *commit, "--transcript", bad], {}),
        "commit --host-tools": (["--vault", v, *commit, "--transcript",
                                 str(Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"),
                                 "--host-tools", bad], {}),
        "init": (["init", bad], {}),
        "import": (["--vault", v, "import", bad], {}),
        "export --file": (["--vault", v, "export", "--to", "codex", "--file", bad], {}),
        "show --source --transcript": (["--vault", v, "show", example_vault.load().entries[0].id, "--source",
                                        "--transcript", bad], {}),
    }[where]
    if where == "[layers] user_vault":   # the person's own config.toml
        from helpers_person import set_person

        set_person("layers", {"user_vault": bad}, Path(os.environ["HOME"]) / ".config" / "acpmem" / "config.toml")
    head = git_out(example_vault.root, "rev-parse", "HEAD")
    r = cli("memory", *argv, env=env, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    assert lines[0].startswith("Error: ") and "internal error" not in lines[0], lines
    assert f"there is no user '{NO_USER[1:]}'" in lines[0] and "give the full path" in lines[0], lines
    assert not any(p.name.startswith("~") for p in tmp_path.iterdir()), list(tmp_path.iterdir())
    assert git_out(example_vault.root, "rev-parse", "HEAD") == head
    assert not list((example_vault.root / ".git" / "acpmem" / "pending").glob("r-*.json"))


def test_a_home_path_where_no_home_is_known_is_one_line(monkeypatch):
    """``~/…`` with no ``HOME`` and no entry for this user in the password database (a container run as an
    arbitrary user id): the error says so and what to set. The password database is the one part stood in for:
    this machine's has an entry for every user a test runs as."""
    import pwd

    from acpmem.core.errors import AcpmemError
    from acpmem.infra.files import expand_home

    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(AcpmemError) as exc:
        expand_home("~/.acp-memory", "ACPMEM_USER_VAULT")
    assert exc.value.line() == ("Error: ACPMEM_USER_VAULT '~/.acp-memory' starts with ~, and no home folder is known "
                                "(HOME is not set and this user has no entry in the password database) — set HOME, "
                                "or give the full path")
    assert expand_home("/abs/~x", "p") == Path("/abs/~x") and expand_home("a~b", "p") == Path("a~b")


def test_without_a_home_folder_a_projects_tilde_folder_is_never_the_persons_config(example_vault, cli, tmp_path,
                                                                                   monkeypatch):
    """No ``HOME`` and no entry in the password database: ``~/.config/acpmem`` is no folder at all — one line
    saying to set ``HOME`` (or ``XDG_CONFIG_HOME``), never a folder named ``~`` in the current one, where a project
    could have put a trust list or a model endpoint for the person. With ``XDG_CONFIG_HOME`` and
    ``XDG_CACHE_HOME`` given the commands work. (The password database is stood in for, as above.)"""
    import pwd

    planted = tmp_path / "~" / ".config" / "acpmem"
    planted.mkdir(parents=True)
    (planted / "config.toml").write_text('[extraction]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "planted"\n')
    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    v = str(example_vault.root)
    r = cli("memory", "--vault", v, "doctor", cwd=tmp_path, env={"ACPMEM_USER_VAULT": "none"})
    assert r.returncode == 1 and r.stderr.strip() == (
        "Error: no home folder is known (HOME is not set and this user has no entry in the password database) — "
        "set HOME, or XDG_CONFIG_HOME"), (r.stdout, r.stderr)
    own = tmp_path / "own"
    env = {"ACPMEM_USER_VAULT": "none", "XDG_CONFIG_HOME": str(own / "config"), "XDG_CACHE_HOME": str(own / "cache")}
    r = cli("memory", "--vault", v, "recall", "deploy", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    r = cli("memory", "--vault", v, "doctor", "--json", cwd=tmp_path, env=env)
    assert "planted" not in r.stdout and "127.0.0.1:9" not in r.stdout, r.stdout
    assert [p.relative_to(tmp_path) for p in (tmp_path / "~").rglob("*") if p.is_file()] == \
        [Path("~/.config/acpmem/config.toml")]     # nothing cached or written under the project's `~`


def test_show_source_takes_a_quoted_tilde_transcript_as_the_shell_would(example_vault, cli, tmp_path):
    """``show --source --transcript "~/…"`` (quoted, so no shell expanded it): the file under the home folder is
    read, as ``commit --transcript`` reads it; ``~NUL`` is no user."""
    import shutil

    home = Path(os.environ["HOME"])
    shutil.copy(Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json", home / "t.json")
    r = cli("memory", "--vault", str(example_vault.root), "commit", "--type", "fact", "--note", "Queues use SQLite.",
            "--importance", "5", "--session", "s-home", "--seq", "6", "--transcript", "~/t.json", "--wait",
            "--extractor", "offline", "--json")
    assert r.returncode == 0, r.stderr
    ident = json.loads(r.stdout)["outcome"]["entries"][0]["id"]
    quoted = cli("memory", "--vault", str(example_vault.root), "show", ident, "--source", "--transcript", "~/t.json")
    full = cli("memory", "--vault", str(example_vault.root), "show", ident, "--source", "--transcript",
               str(home / "t.json"))
    assert quoted.returncode == 0 and quoted.stdout == full.stdout, (quoted.stderr, quoted.stdout, full.stdout)
    assert "not recorded" not in quoted.stdout and "does not exist" not in quoted.stdout + quoted.stderr, quoted.stdout
    from acpmem.core.errors import AcpmemError
    from acpmem.infra.files import expand_home

    with pytest.raises(AcpmemError, match="there is no user"):
        expand_home("~a\x00b/x", "p")

