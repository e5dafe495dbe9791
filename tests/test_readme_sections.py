"""The docs' sections on compression (docs/write-path.md) and review (docs/review.md), run as a stranger runs them: ``acp``
a real process (``tests/support/launcher.py``: without a fresh interpreter) in a fresh folder with its own HOME (so no
real ~/.acp-memory is read or written), each block as written."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import launcher
from helpers_proc import doc_with

ROOT = Path(__file__).resolve().parents[1]


def _block(after: str, nth: int = 0) -> str:
    text = doc_with(after)
    return re.findall(r"```sh\n(.*?)```", text[text.index(after):], re.S)[nth]


def _env(tmp_path: Path, **extra: str) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=launcher.path_env(), TMPDIR=str(tmp_path),
               HOME=str(home), ACPMEM_USER_VAULT="", GIT_CONFIG_GLOBAL=os.environ.get("GIT_CONFIG_GLOBAL", ""),
               **extra)
    for k in ("ACPMEM_VAULT", "OPENAI_BASE_URL", "OPENAI_MODEL", "ACPMEM_SESSION"):
        env.pop(k, None)
    if not env["GIT_CONFIG_GLOBAL"]:
        env.pop("GIT_CONFIG_GLOBAL")
    return env


def _run(script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=240)


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    (proj / "examples").symlink_to(ROOT / "examples")      # the README's commands run from a clone of the repo
    return proj


def test_the_compression_block_runs_as_written(tmp_path):
    proj = _project(tmp_path)
    env = _env(tmp_path)
    assert _run("acp memory init >/dev/null", proj, env).returncode == 0
    block = _block("## Memory grows out of compression")
    assert "$SID" in block and "SID=" in block          # every variable it uses is set in it
    r = _run(block, proj, env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Error" not in r.stderr and "Traceback" not in r.stderr
    assert "b2 (tier 2, \"Auth + tests\")" in r.stdout
    assert 'kind="block" id="b2" tier="2"' in r.stdout               # show --source followed the citation
    assert "[LONG-TERM MEMORY]" in r.stdout and "memory_commit" in r.stdout
    assert not (Path(env["HOME"]) / ".acp-memory").exists()


def test_the_review_and_remember_blocks_run_as_written(tmp_path):
    proj = _project(tmp_path)
    editor = tmp_path / "editor.sh"   # a person who writes a line and saves
    editor.write_text("#!/bin/sh\nprintf 'Run the migrations before the deploy, never after.\\n' > \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    env = _env(tmp_path, EDITOR=str(editor), VISUAL=str(editor))
    text = doc_with("# Deciding what counts")
    part = text[text.index("# Deciding what counts"):]
    review, remember, consolidate = (_block("# Deciding what counts", i) for i in range(3))
    assert "**Remember it yourself**" in part and "acp memory consolidate" in consolidate
    r = _run(review, proj, env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert len(re.findall(r"^Accepted fork-write #\w+ \(commit", r.stdout, re.M)) == 2, r.stdout
    assert re.search(r"^Rejected fork-write #\w+ \(commit", r.stdout, re.M), r.stdout
    r = _run(remember, proj, env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert r.stdout.count("Remembered #") == 3
    titles = [e["title"] for e in json.loads(_run("acp memory list --json", proj, env).stdout)["entries"]]
    assert "Why we pinned pnpm" in titles and any("migrations" in t for t in titles)
    r = _run(consolidate, proj, env)
    assert r.returncode == 0 and "cluster(s) among" in r.stdout, (r.stdout[-2000:], r.stderr[-2000:])


def test_init_user_names_a_next_step_that_works_where_it_was_run(tmp_path):
    """Outside any project, `list` fails (the user vault is read beside a project's vault): init --user must not
    suggest it; what it suggests runs."""
    env = _env(tmp_path)
    home = Path(env["HOME"])
    r = _run("acp memory init --user", home, env)
    assert r.returncode == 0, r.stderr
    nxt = r.stdout.splitlines()[-1]
    assert nxt.startswith("Next: in a project") and "`acp memory list` to see" not in nxt
    cmd = re.search(r"`(acp memory remember [^`]*)`", nxt).group(1)
    r = _run(cmd.replace("TEXT", "'Answer briefly.'"), home, env)
    assert r.returncode == 0 and r.stdout.startswith("Remembered #u-"), (r.stdout, r.stderr)
    proj = _project(tmp_path)
    assert _run("acp memory init", proj, env).stdout.splitlines()[-1].startswith("Next: `acp memory list`")
    r = _run("acp memory list", proj, env)
    assert r.returncode == 0 and "user    #u-" in r.stdout


def test_sync_user_without_a_remote_says_to_run_sync_user_again(tmp_path):
    env = _env(tmp_path)
    home = Path(env["HOME"])
    assert _run("acp memory init --user", home, env).returncode == 0
    r = _run("acp memory sync --user", home, env)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "(then `acp memory sync --user`)" in r.stderr and f"git -C {home / '.acp-memory'} remote add" in r.stderr
    proj = _project(tmp_path)
    _run("acp memory init", proj, env)
    r = _run("acp memory sync", proj, env)
    assert r.returncode != 0 and "(then `acp memory sync`)" in r.stderr


def test_every_example_in_command_help_starts_its_own_line(tmp_path):
    """Two `Example:` lines in one paragraph of a docstring are rewrapped into one line by the help formatter
    ("Example: acp memory extract --pending Example: acp memory …"): every example must start a line of the help
    a person reads."""
    import typer

    import acpmem.cli.commands_integrations  # noqa: F401  (registers the commands)
    import acpmem.cli.commands_porting  # noqa: F401
    import acpmem.cli.commands_read  # noqa: F401
    import acpmem.cli.commands_review  # noqa: F401
    import acpmem.cli.commands_vault  # noqa: F401
    import acpmem.cli.commands_write  # noqa: F401
    from acpmem.cli.app import app

    group = typer.main.get_command(app)
    seen = 0

    def walk(cmd, path: list[str]) -> None:
        nonlocal seen
        if hasattr(cmd, "commands"):   # a group (typer's own classes, not necessarily click's)
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
            return
        with cmd.context_class(cmd, info_name=" ".join(path), terminal_width=100) as ctx:
            text = cmd.get_help(ctx)
        for line in text.splitlines():
            if "Example:" in line:
                seen += 1
                assert line.strip().startswith("Example:") and line.count("Example:") == 1, (path, line)

    assert hasattr(group, "commands")
    walk(group, ["acp", "memory"])
    assert seen > 20
