"""The command line as users meet it: real processes, exact JSON, one-line errors, help everywhere."""
from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from acpmem.core.entry import Citation, Entry
from acpmem.vault.writer import KIND_FORK


def _commands(app) -> list[str]:
    return sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_every_command_has_help_with_an_example():
    from acpmem.cli.main import typer_app

    app = typer_app()

    names = _commands(app)
    assert {"init", "list", "show", "score", "edit", "forget", "log", "doctor"} <= set(names)
    runner = CliRunner()
    for name in names:
        res = runner.invoke(app, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)
        assert "Example" in res.output, f"`{name} --help` shows no example"
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "init" in res.output


def test_three_entry_points_agree(example_vault, cli):
    v = str(example_vault.root)
    a = cli("memory", "list", "--format", "json", "--vault", v)
    b = cli("list", "--format", "json", "--vault", v, prog="acpmem")
    c = subprocess.run([sys.executable, "-m", "acpmem", "list", "--format", "json", "--vault", v],
                       capture_output=True, text=True)
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout == c.stdout
    assert len(json.loads(a.stdout)["entries"]) == len(example_vault.load().entries)


def test_fast_path_prints_what_the_full_cli_prints(example_vault, cli):
    v = str(example_vault.root)
    for fmt in ("json", "markdown", "table", "prompt"):
        fast = cli("memory", "list", "--format", fmt, "--vault", v, "--session", "same")
        full = cli("memory", "list", "--format", fmt, "--vault", v, "--session", "same",
                   env={"ACPMEM_NO_FASTPATH": "1"})
        assert fast.returncode == full.returncode == 0, full.stderr
        assert fast.stdout == full.stdout, fmt


def test_readme_main_job_init_example_then_list(tmp_path, cli):
    r = cli("memory", "init", "--example", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Created the vault" in r.stdout
    r = cli("memory", "list", cwd=tmp_path)
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 10 and all(ln.startswith("#") and "(importance " in ln for ln in lines)


def _many(v, n: int) -> None:
    es = []
    for i in range(n):
        ident = v.new_id({e.id for e in es})
        title = f"Memory number {i}: a decision about component {i} that matters for later sessions"
        es.append(Entry(id=ident, title=title, type="decision", importance=1 + i % 10, created=v.now(),
                        body=f"- detail {i}\n", citation=(Citation("s", i),)).with_changes(path=v.path_for(ident, title)))
    v.write_entries(es, subject=f"{n} entries", why="test", kind=KIND_FORK)


def test_prompt_index_is_cut_to_the_budget_and_says_how_many_were_left_out(vault, cli):
    _many(vault, 30)
    r = cli("memory", "list", "--format", "prompt", "--budget", "400", "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    shown = [ln for ln in r.stdout.splitlines() if ln.startswith("- [decision]")]
    assert 0 < len(shown) < 30
    assert f"({30 - len(shown)} more entries not shown to fit the budget" in r.stdout
    assert "not instructions" in r.stdout
    lines = r.stdout.splitlines()
    assert sum(ln.startswith("<<acpmem-data ") for ln in lines) == 1
    assert sum(ln.startswith("<</acpmem-data ") for ln in lines) == 1
    importances = [int(ln.split("importance ")[1].split(",")[0]) for ln in shown]
    assert importances == sorted(importances, reverse=True)          # by score: importance dominates here
    full = cli("memory", "list", "--format", "prompt", "--vault", str(vault.root))
    assert "more entries not shown" not in full.stdout
    assert len([ln for ln in full.stdout.splitlines() if ln.startswith("- [decision]")]) == 30


def test_prompt_index_is_frozen_per_session(example_vault, cli):
    v = str(example_vault.root)
    first = cli("memory", "list", "--format", "prompt", "--session", "S1", "--vault", v).stdout
    _many(example_vault, 2)
    cli("memory", "show", example_vault.load().entries[0].id, "--vault", v)
    again = cli("memory", "list", "--format", "prompt", "--session", "S1", "--vault", v).stdout
    assert again == first                                            # same bytes despite new entries and reads
    other = cli("memory", "list", "--format", "prompt", "--session", "S2", "--vault", v).stdout
    assert "(12 entries" in other and "(10 entries" in first
    refreshed = cli("memory", "list", "--format", "prompt", "--session", "S1", "--refresh", "--vault", v).stdout
    assert "(12 entries" in refreshed


def test_errors_are_one_line_with_a_next_step_and_exit_codes(tmp_path, example_vault, cli):
    r = cli("memory", "list", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: no vault found") and "acp memory init" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = cli("memory", "list", "--format", "yaml", "--vault", str(example_vault.root))
    assert r.returncode == 2
    r = cli("memory", "show", "zzzz", "--vault", str(example_vault.root))
    assert r.returncode == 1 and r.stderr.startswith("Error: no entry with id 'zzzz'")
    r = cli("memory", "forget", example_vault.load().entries[0].id, "--reason", " ", "--vault", str(example_vault.root))
    assert r.returncode == 2 and "--reason" in r.stderr


def test_an_empty_or_broken_session_id_is_refused_by_every_command_that_takes_one(example_vault, cli):
    """``--session "$ID"`` with the variable unset: one line and exit 2 from each, never a listing that is silently
    not frozen or a recall that is not noted in any session."""
    v = str(example_vault.root)
    for bad in ("", "   ", "a\tb"):
        for argv in (("list", "--format", "prompt"), ("list",), ("list", "--json"), ("recall", "deploy"),
                     ("surface",), ("surface", "--prompt", "how do we deploy?")):
            r = cli("memory", *argv, "--session", bad, "--vault", v)
            assert r.returncode == 2 and r.stdout == "", (argv, bad, r.stdout)
            assert len(r.stderr.splitlines()) == 1, (argv, r.stderr)
            if "--json" in argv:   # said as the JSON error object
                error = json.loads(r.stderr)["error"]
                assert error["code"] == "usage" and error["message"].startswith("a session id "), error
            else:
                assert r.stderr.startswith("Error: a session id ") and "pass the host's session id" in r.stderr
    assert not (example_vault.state_dir / "sessions").exists() or not any((example_vault.state_dir / "sessions").iterdir())


def test_show_json_and_ambiguous_prefix(vault, cli):
    es = []
    for ident in ("ab1111", "ab2222"):
        es.append(Entry(id=ident, title=f"t {ident}", type="fact", importance=3, created=vault.now(), body="- b\n",
                        citation=(Citation("sess", 9),)).with_changes(path=f"entries/{ident}.md"))
    vault.write_entries(es, subject="two", why="test")
    r = cli("memory", "show", "ab", "--vault", str(vault.root))
    assert r.returncode == 1 and "ab1111, ab2222" in r.stderr
    r = cli("memory", "show", "ab2", "--json", "--vault", str(vault.root))
    d = json.loads(r.stdout)
    assert d["id"] == "ab2222" and d["citation"] == [{"session": "sess", "seq": 9}] and d["body"] == "- b\n"
    assert d["last_read"] is not None                               # show marks read


def _editor(tmp_path: Path, script: str) -> str:
    p = tmp_path / "editor.sh"
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def _on_a_terminal(*args: str, env: dict) -> subprocess.CompletedProcess:
    """The console script with stdin and stdout on a pseudo-terminal (a person at a terminal), stderr captured."""
    import os
    import pty

    master, slave = pty.openpty()
    full = {**os.environ, **env}
    try:
        p = subprocess.run([str(Path(sys.executable).parent / "acp"), *args], stdin=slave, stdout=slave,
                           stderr=subprocess.PIPE, text=True, env=full, timeout=120)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the terminal's other end is closed and everything was read
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return subprocess.CompletedProcess(p.args, p.returncode, b"".join(chunks).decode("utf-8", "replace"), p.stderr)


def test_edit_without_editor_variables_uses_the_editor_the_machine_has(example_vault, cli, tmp_path):
    """No $VISUAL or $EDITOR, on a terminal: vi, else nano, when the machine has one; with neither, the error names
    the variable. (Without a terminal no editor is started: tests/test_cli_defects.py.)"""
    v = example_vault
    e = sorted(v.load().entries, key=lambda e: e.id)[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    env = {"PATH": str(bin_dir), "VISUAL": "", "EDITOR": ""}
    r = _on_a_terminal("memory", "edit", e.id, "--vault", str(v.root), env=env)
    # the machine, not the command line: exit 1
    assert r.returncode == 1 and "editor 'vi' not found" in r.stderr and "set $EDITOR" in r.stderr, r.stderr
    sed = shutil.which("sed")
    (bin_dir / "nano").symlink_to(_editor(tmp_path, f'{sed} -i "s/^importance: .*/importance: 10/" "$1"\n'))
    r = _on_a_terminal("memory", "edit", e.id, "--vault", str(v.root), env=env)
    assert r.returncode == 0 and "Saved" in r.stdout, r.stderr
    assert v.resolve(e.id).importance == 10


def test_edit_through_editor_validates_and_commits(example_vault, cli, tmp_path):
    v = example_vault
    e = sorted(v.load().entries, key=lambda e: e.id)[0]
    good = _editor(tmp_path, 'sed -i "s/^importance: .*/importance: 10/" "$1"\n')
    r = cli("memory", "edit", e.id, "-m", "raise it", "--vault", str(v.root), env={"EDITOR": good})
    assert r.returncode == 0, r.stderr
    assert "Saved" in r.stdout
    assert v.resolve(e.id).importance == 10
    log = json.loads(cli("memory", "log", e.id, "--json", "--vault", str(v.root)).stdout)
    assert log["entry"] == e.id and log["changes"][0]["kind"] == "edit"
    before = (v.root / e.path).read_bytes()
    bad = _editor(tmp_path, 'sed -i "s/^importance: .*/importance: 99/" "$1"\n')
    r = cli("memory", "edit", e.id, "--vault", str(v.root), env={"EDITOR": bad})
    assert r.returncode == 1 and "edit refused" in r.stderr and "importance" in r.stderr
    assert (v.root / e.path).read_bytes() == before                   # nothing changed
    draft = v.state_dir / "edit" / f"{e.id}.md"
    assert "importance: 99" in draft.read_text()                      # nothing lost: the draft is kept
    draft.write_text(draft.read_text().replace("importance: 99", "importance: 2"))
    r = cli("memory", "edit", e.id, "--from", str(draft), "--vault", str(v.root))
    assert r.returncode == 0, r.stderr
    assert v.resolve(e.id).importance == 2


def test_forget_log_doctor_json(example_vault, cli):
    v = str(example_vault.root)
    e = example_vault.load().entries[0]
    r = cli("memory", "forget", e.id, "--reason", "wrong", "--json", "--vault", v)
    d = json.loads(r.stdout)
    assert d["forgotten"] == e.id and len(d["commit"]) == 40
    log = json.loads(cli("memory", "log", "--json", "--vault", v).stdout)
    assert isinstance(log, dict) and log["entry"] is None      # an object, like every other command's --json
    kinds = [i["kind"] for i in log["changes"]]
    assert kinds[:1] == ["forget"] and kinds[-1] == "init"
    doc = json.loads(cli("memory", "doctor", "--json", "--vault", v).stdout)
    assert doc["ok"] is True and any("9 valid entries" in f["what"] for f in doc["findings"])
    (example_vault.entries_dir / "x.md").write_text("---\nid: x\n")
    r = cli("memory", "doctor", "--json", "--vault", v)
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False


def test_recall_fast_path_prints_what_the_full_cli_prints(example_vault, cli):
    v = str(example_vault.root)
    for args in (("recall", "upload limit", "--json", "-n", "2"), ("recall", "日志", "--type", "decision"),
                 ("recall", "nothing-like-this-anywhere")):
        fast = cli("memory", *args, "--vault", v)
        full = cli("memory", *args, "--vault", v, env={"ACPMEM_NO_FASTPATH": "1"})
        assert fast.returncode == full.returncode == 0, full.stderr
        # the hits are marked read as they are returned: only that time may differ between the two runs
        same = re.sub(r'"last_read": "[^"]*"', "", fast.stdout) == re.sub(r'"last_read": "[^"]*"', "", full.stdout)
        assert same, args
    bad = cli("memory", "recall", "x", "--type", "gossip", "--vault", v)
    bad_full = cli("memory", "recall", "x", "--type", "gossip", "--vault", v, env={"ACPMEM_NO_FASTPATH": "1"})
    assert bad.returncode == bad_full.returncode != 0 and bad.stderr == bad_full.stderr


# ------------------------------------------------------------------------------------------------ shell completion

def _completion_env(home: Path, **extra: str) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE")}
    env.update(HOME=str(home), **extra)
    return env


def test_install_completion_for_bash_zsh_and_fish(tmp_path, cli):
    """`acp --install-completion` writes the shell's completion script where the shell loads it (the shell is
    named explicitly here; from a terminal typer detects it)."""
    env = _completion_env(tmp_path, _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    for shell, script in (("bash", ".bash_completions/acp.sh"), ("zsh", ".zfunc/_acp"),
                          ("fish", ".config/fish/completions/acp.fish")):
        r = cli("--install-completion", shell, env=env)
        assert r.returncode == 0, r.stderr
        assert "_ACP_COMPLETE" in (tmp_path / script).read_text(), shell
    assert ".bash_completions/acp.sh" in (tmp_path / ".bashrc").read_text()
    assert "compinit" in (tmp_path / ".zshrc").read_text()
    r = cli("--install-completion", "bash", env=env, prog="acpmem")
    assert r.returncode == 0 and "_ACPMEM_COMPLETE" in (tmp_path / ".bash_completions/acpmem.sh").read_text()


def test_bash_completes_commands_options_entry_ids_and_types(example_vault, tmp_path, cli):
    """The installed bash script, run by a real bash, completes from the vault."""
    env = _completion_env(tmp_path, _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    assert cli("--install-completion", "bash", env=env).returncode == 0
    acp = Path(sys.executable).parent / "acp"
    ids = sorted(e.id for e in example_vault.load().entries)

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        script = (f'source "$HOME/.bash_completions/acp.sh"; complete -p acp >/dev/null; '
                  f'COMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; '
                  f'_acp_completion {acp}; printf "%s\\n" "${{COMPREPLY[@]}}"')
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                           cwd=example_vault.root, timeout=60)
        assert r.returncode == 0, r.stderr
        return [w for w in r.stdout.splitlines() if w]

    assert "memory" in complete("acp mem")
    assert {"show", "score", "surface", "sync"} <= set(complete("acp memory s"))
    assert complete("acp memory list --fo") == ["--format"]
    assert complete("acp memory show ") == ids
    assert complete(f"acp memory forget {ids[0][:3]}") == [i for i in ids if i.startswith(ids[0][:3])]
    assert complete("acp memory recall q --type ") == list(example_vault.settings.types)
    assert complete("acp memory commit --type us") == ["user-preference"]


def test_zsh_and_fish_completion_answer_from_the_vault(example_vault, tmp_path, cli):
    ids = sorted(e.id for e in example_vault.load().entries)
    zsh = cli(env=_completion_env(tmp_path, _ACP_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="acp memory log "),
              cwd=example_vault.root)
    assert zsh.returncode == 0 and all(f'"{i}"' in zsh.stdout for i in ids)
    fish = cli(env=_completion_env(tmp_path, _ACP_COMPLETE="complete_fish", _TYPER_COMPLETE_FISH_ACTION="get-args",
                                   _TYPER_COMPLETE_ARGS="acp memory edit "), cwd=example_vault.root)
    assert fish.returncode == 0 and fish.stdout.split() == ids


def test_completion_outside_a_vault_offers_the_default_types_and_no_ids(tmp_path, cli):
    base = dict(_ACP_COMPLETE="complete_zsh")
    ids = cli(env=_completion_env(tmp_path, **base, _TYPER_COMPLETE_ARGS="acp memory show "), cwd=tmp_path)
    assert ids.returncode == 0 and "Error" not in ids.stdout + ids.stderr
    types = cli(env=_completion_env(tmp_path, **base, _TYPER_COMPLETE_ARGS="acp memory commit --type "), cwd=tmp_path)
    assert '"decision"' in types.stdout and '"reference"' in types.stdout


def test_json_with_another_format_is_a_usage_error(example_vault, cli):
    for fmt in ("prompt", "markdown"):
        r = cli("memory", "list", "--json", "--format", fmt, "--vault", str(example_vault.root))
        assert r.returncode == 2 and r.stdout == ""   # --json asked for: the error is the JSON object
        assert json.loads(r.stderr)["error"]["message"] == f"--json and --format {fmt} ask for two different outputs"
    assert cli("memory", "list", "--json", "--format", "json", "--vault", str(example_vault.root)).returncode == 0


# --------------------------------------------------------------------------------------------- where the output goes

def _acp(args: list[str], *, fast: bool = True, **kw) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **kw.pop("env", {}))
    if not fast:
        env["ACPMEM_NO_FASTPATH"] = "1"
    return subprocess.run([str(Path(sys.executable).parent / "acp"), "memory", *args], capture_output=kw.pop(
        "capture", True), text=True, env=env, timeout=120, **kw)


def _one_error(r: subprocess.CompletedProcess, words: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    if "--json" in r.args:   # the error as the JSON object
        err = json.loads(lines[0])["error"]
        assert err["exit"] == 1 and words in err["message"], r.stderr
    else:
        assert lines[0].startswith("Error: ") and words in lines[0], r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


def test_output_that_cannot_be_written_is_one_line_never_an_internal_error(example_vault, tmp_path):
    """`> /dev/full`, a closed stdout (`>&-`), a reader that went away (`| head -0`): the fast path and typer alike."""
    import os

    v = str(example_vault.root)
    for fast in (True, False):
        for args in (["list", "--vault", v], ["list", "--json", "--vault", v], ["recall", "upload", "--vault", v],
                     ["doctor", "--vault", v], ["--help"]):
            with open("/dev/full", "w") as full:
                r = _acp(args, fast=fast, stdout=full, capture=False, stderr=subprocess.PIPE)
            _one_error(r, "could not write the output: No space left on device")
            r = _acp(args, fast=fast, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, capture=False,
                     preexec_fn=lambda: os.close(1))
            _one_error(r, "could not write the output: standard output is closed")
        read, write = os.pipe()
        os.close(read)   # what `| head -0` leaves: a pipe nobody reads
        try:
            r = _acp(["list", "--vault", v], fast=fast, stdout=write, stderr=subprocess.PIPE, capture=False)
        finally:
            os.close(write)
        assert r.returncode == 1 and r.stderr == "", r.stderr
    # a closed stdout never lends its number to a file the command opens (the index, git's output)
    r = _acp(["remember", "Closed outputs take nothing", "--type", "fact", "--importance", "3", "--vault", v],
             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, capture=False, preexec_fn=lambda: os.close(1))
    _one_error(r, "standard output is closed")
    r = _acp(["list", "--json", "--vault", v])
    assert r.returncode == 0 and "Closed outputs take nothing" in r.stdout   # written before the output failed


def test_a_deleted_current_folder_is_one_line(example_vault, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    acp = str(Path(sys.executable).parent / "acp")
    first = json.loads(_acp(["list", "--json", "--vault", str(example_vault.root)]).stdout)["entries"][0]["id"]
    for fast in ("", "1"):
        for args in ("list", "recall upload", "doctor", f"show {first}"):
            r = subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "{acp}" memory {args}'],
                               capture_output=True, text=True, timeout=120,
                               env={**__import__("os").environ, "ACPMEM_NO_FASTPATH": fast})
            _one_error(r, "the current folder no longer exists")
            assert "--vault" in r.stderr
            gone.mkdir()
    # with --vault the folder one stands in does not matter
    r = subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "{acp}" memory list --vault '
                                    f'"{example_vault.root}"'], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"#{first}" in r.stdout, r.stderr


def test_an_ascii_only_output_gets_escapes_and_json_stays_the_same_data(example_vault):
    v = str(example_vault.root)
    utf8 = json.loads(_acp(["list", "--json", "--vault", v]).stdout)
    wide = next(e for e in utf8["entries"] if e["title"].startswith("上传"))
    esc = "".join(f"\\u{ord(c):04x}" for c in "上传")
    for fast in (True, False):
        r = _acp(["list", "--json", "--vault", v], fast=fast, env={"PYTHONIOENCODING": "ascii"})
        assert r.returncode == 0 and r.stdout.isascii(), r.stderr
        assert json.loads(r.stdout) == json.loads(_acp(["list", "--json", "--vault", v]).stdout)
        r = _acp(["list", "--vault", v], fast=fast, env={"PYTHONIOENCODING": "ascii"})
        assert r.returncode == 0 and f"#{wide['id']} [lesson] {esc}" in r.stdout, r.stdout + r.stderr
        r = _acp(["show", wide["id"], "--vault", v], fast=fast, env={"PYTHONIOENCODING": "ascii"})
        assert r.returncode == 0 and esc in r.stdout, r.stderr
        r = _acp(["recall", "upload", "--vault", v], fast=fast, env={"PYTHONIOENCODING": "ascii"})
        assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    r = _acp(["remember", "--type", "fact", "--importance", "3", "--title", "Café crème", "--vault", v],
             input="Über naïve text, 上传\n", env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and "Caf\\u00e9 cr\\u00e8me" in r.stdout, r.stderr
    shown = json.loads(_acp(["list", "--json", "--vault", v]).stdout)
    assert "Café crème" in [e["title"] for e in shown["entries"]]
