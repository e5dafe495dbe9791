"""`acp memory hook claude-code`: real Claude Code hook events on stdin of the real command."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


def _event(name: str, cwd: Path, session: str = "cc-session-1", **more) -> str:
    return json.dumps({"session_id": session, "transcript_path": str(cwd / "t.jsonl"), "cwd": str(cwd),
                       "hook_event_name": name, **more})


def _hook(cli, stdin: str, *args: str, cwd: Path | None = None, env: dict | None = None):
    return cli("memory", "hook", "claude-code", *args, input=stdin, cwd=cwd, env=env)


def _enable_surface(root: Path, enabled: str = "true", prompt: str = "false") -> None:
    """The score-based surfacing on (and the prompt's relevance off), or any other pair of the two switches."""
    p = root / "acpmem.toml"
    text = re.sub(r"(?m)^enabled = \w+\nprompt = \w+\n", f"enabled = {enabled}\nprompt = {prompt}\n", p.read_text())
    assert f"prompt = {prompt}" in text
    p.write_text(text)


@pytest.fixture
def project(tmp_path, clock):
    """A project folder with its vault at project/.acp-memory (found from the event's cwd), examples seeded."""
    from acpmem.vault.create import init_vault

    proj = tmp_path / "project"
    (proj / "src").mkdir(parents=True)
    v = init_vault(proj, example=True, clock=clock)
    yield proj, v
    v.close()


def test_session_start_answers_the_frozen_index_found_from_cwd(project, cli, tmp_path):
    proj, v = project
    r = _hook(cli, _event("SessionStart", proj / "src", source="startup"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    ctx = out["hookSpecificOutput"]
    assert ctx["hookEventName"] == "SessionStart"
    assert "Session append must be re-entrant" in ctx["additionalContext"]
    assert "<<acpmem-data" in ctx["additionalContext"]
    # the same bytes as `acp memory list --format prompt` for that session, and stable after a compact
    listed = cli("memory", "--vault", str(v.root), "list", "--format", "prompt", "--session", "cc-session-1")
    assert listed.stdout == ctx["additionalContext"]
    v.mark_read([e.id for e in v.load().entries])
    again = _hook(cli, _event("SessionStart", proj, source="compact"), cwd=tmp_path)
    assert json.loads(again.stdout) == out
    other = _hook(cli, _event("SessionStart", proj, session="cc-session-2"), cwd=tmp_path)
    assert other.returncode == 0 and json.loads(other.stdout)["hookSpecificOutput"]["additionalContext"]


def test_user_prompt_submit_surfaces_by_score_only_when_enabled(project, cli, tmp_path):
    proj, v = project
    ev = _event("UserPromptSubmit", proj, prompt="how do we deploy?")
    _enable_surface(v.root, enabled="false", prompt="false")
    off = _hook(cli, ev, cwd=tmp_path)
    assert off.returncode == 0 and off.stdout == "" and off.stderr == ""
    _enable_surface(v.root)
    on = _hook(cli, ev, cwd=tmp_path)
    assert on.returncode == 0, on.stderr
    ctx = json.loads(on.stdout)["hookSpecificOutput"]
    assert ctx["hookEventName"] == "UserPromptSubmit"
    shown = [e for e in v.load().entries if e.id in ctx["additionalContext"]]
    assert shown and "<<acpmem-data" in ctx["additionalContext"]
    # surfaced entries are not surfaced again in the same session
    again = _hook(cli, ev, cwd=tmp_path)
    assert again.returncode == 0
    if again.stdout:
        later = json.loads(again.stdout)["hookSpecificOutput"]["additionalContext"]
        assert not any(f"#{e.id}" in later or f'id="{e.id}"' in later for e in shown)


def test_other_events_and_no_vault_answer_nothing(project, cli, tmp_path):
    proj, _ = project
    for name in ("PreToolUse", "Stop", "SessionEnd", "Notification"):
        r = _hook(cli, _event(name, proj, tool_name="Bash"), cwd=tmp_path)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    elsewhere = tmp_path / "no-memory-here"
    elsewhere.mkdir()
    r = _hook(cli, _event("SessionStart", elsewhere), cwd=elsewhere)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_explicit_vault_wins_over_cwd_and_a_missing_one_is_reported(project, cli, tmp_path):
    proj, v = project
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _hook(cli, _event("SessionStart", elsewhere), "--vault", str(v.root), cwd=elsewhere)
    assert r.returncode == 0 and "Session append" in r.stdout
    r = _hook(cli, _event("SessionStart", proj), "--vault", str(tmp_path / "nope"), cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == "" and "acp memory init" in r.stderr
    r = _hook(cli, _event("SessionStart", elsewhere), cwd=elsewhere, env={"ACPMEM_VAULT": str(v.root)})
    assert r.returncode == 0 and "Session append" in r.stdout


@pytest.mark.parametrize("stdin, reason", [
    ("", "no hook event"),
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"session_id": "x"}', "hook_event_name"),
    ('{"hook_event_name": "SessionStart", "cwd": 7}', "cwd"),
    ('{"hook_event_name": "SessionStart", "cwd": "/tmp"}', "session_id"),
])
def test_malformed_input_is_shown_but_never_blocks(cli, tmp_path, stdin, reason):
    r = _hook(cli, stdin, cwd=tmp_path)
    assert r.returncode == 1  # Claude Code: non-blocking error, stderr shown; 2 would block the prompt
    assert r.stdout == "" and reason in r.stderr and r.stderr.startswith("Error: ") and " — " in r.stderr
    assert r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr


def test_hook_help(cli):
    r = cli("memory", "hook", "claude-code", "--help")
    assert r.returncode == 0 and "SessionStart" in r.stdout and "exit 1" in r.stdout


def test_fast_path_answers_like_the_full_cli(project, cli, tmp_path):
    """The typer-free path gives the same bytes and exit codes as the typer command."""
    import subprocess
    import sys

    proj, v = project
    code = "import sys; from acpmem.cli.fast import try_fast; sys.exit(try_fast(sys.argv[1:], 'acpmem'))"

    def fast(stdin: str, *args: str):
        return subprocess.run([sys.executable, "-c", code, "hook", "claude-code", *args], input=stdin,
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)

    for stdin, args in ((_event("SessionStart", proj, session="fast-1"), ()),
                        (_event("SessionStart", tmp_path, session="fast-2"), ("--vault", str(v.root))),
                        ("{oops", ()), (_event("Stop", proj), ())):
        f, full = fast(stdin, *args), _hook(cli, stdin, *args, cwd=tmp_path, env={"ACPMEM_NO_FASTPATH": "1"})
        assert (f.returncode, f.stdout, f.stderr) == (full.returncode, full.stdout, full.stderr)
    assert "Session append" in fast(_event("SessionStart", proj, session="fast-1")).stdout
    # anything it does not parse exactly goes to the full CLI
    none = subprocess.run([sys.executable, "-c", "from acpmem.cli.fast import try_fast; "
                           "print(try_fast(['hook', 'claude-code', '--help'], 'acpmem'), "
                           "try_fast(['hook', 'claude-code', '--vault'], 'acpmem'))"],
                          capture_output=True, text=True, timeout=60)
    assert none.stdout.split() == ["None", "None"]


def test_user_prompt_submit_stays_within_what_claude_code_shows_inline(project, cli, tmp_path):
    """With the default settings, five 4 KB entries would be ~21,000 characters, which Claude Code cuts: the answer
    stays under 10,000 characters, says that more wait, and the entries that waited come in later turns."""
    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.writer import KIND_FORK

    proj, v = project
    _enable_surface(v.root)
    long = []
    for i in range(6):
        ident = v.new_id()
        body = "\n".join(f"- point {j} of a long note about the deploy pipeline and its many stages" for j in range(60))
        e = Entry(id=ident, title=f"Long deploy note {i}", type="fact", importance=10, created="2026-11-20T00:00:00Z",
                  body=body + "\n", citation=(Citation("s", i),))
        long.append(e.with_changes(path=v.path_for(ident, e.title)))
    v.write_entries(long, subject="long notes", why="test", kind=KIND_FORK)
    seen: set[str] = set()
    for turn in range(8):
        r = _hook(cli, _event("UserPromptSubmit", proj, prompt=f"turn {turn}"), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        if not r.stdout:
            break
        ctx = json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
        assert len(ctx) <= 10_000, len(ctx)
        if turn == 0:
            assert "wait for a later turn" in ctx
        seen |= {e.id for e in long if f'id="{e.id}"' in ctx}
    assert seen == {e.id for e in long}       # nothing that waited was lost


def _upload_entries(v):
    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.writer import KIND_FORK

    made = []
    for title, body, imp in (
            ("Uploads over 100 MB use the chunked endpoint", "- Files over 100 MB go through /v2/uploads/chunked in "
             "8 MB parts; the plain upload endpoint times out on big files.", 4),
            ("Nightly backup runs at 02:00", "- The backup job runs at 02:00 UTC and keeps 14 days.", 10)):
        ident = v.new_id()
        e = Entry(id=ident, title=title, type="decision", importance=imp, created="2026-11-20T00:00:00Z",
                  body=body + "\n", citation=(Citation("s", 1),))
        made.append(e.with_changes(path=v.path_for(ident, e.title)))
    v.write_entries(made, subject="notes", why="test", kind=KIND_FORK)
    return made


def test_user_prompt_submit_surfaces_what_the_prompt_is_about_by_default_once_per_session(project, cli, tmp_path):
    proj, v = project
    upload, backup = _upload_entries(v)
    r = _hook(cli, _event("UserPromptSubmit", proj, prompt="What is the upload limit for big files?"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ctx = json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    first = re.search(r'id="([^"]+)"', ctx).group(1)
    assert first == upload.id                        # the entry the words are about, first
    assert backup.id not in ctx                      # the best-scored one is not what the prompt is about
    assert "/v2/uploads/chunked" in ctx and "<<acpmem-data" in ctx
    again = _hook(cli, _event("UserPromptSubmit", proj, prompt="upload limit for big files, again"), cwd=tmp_path)
    assert again.returncode == 0 and upload.id not in again.stdout   # not twice in one session
    other = _hook(cli, _event("UserPromptSubmit", proj, session="cc-2", prompt="big file upload limit"), cwd=tmp_path)
    assert upload.id in other.stdout                 # another session gets it


def test_user_prompt_submit_prompt_surfacing_stays_within_what_claude_code_shows_inline(project, cli, tmp_path):
    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.writer import KIND_FORK

    proj, v = project
    long = []
    for i in range(6):
        ident = v.new_id()
        body = "\n".join(f"- point {j} of a long note about the deploy pipeline and its stages" for j in range(60))
        e = Entry(id=ident, title=f"Long deploy pipeline note {i}", type="fact", importance=5,
                  created="2026-11-20T00:00:00Z", body=body + "\n", citation=(Citation("s", i),))
        long.append(e.with_changes(path=v.path_for(ident, e.title)))
    v.write_entries(long, subject="long notes", why="test", kind=KIND_FORK)
    r = _hook(cli, _event("UserPromptSubmit", proj, prompt="the deploy pipeline stages"), cwd=tmp_path)
    ctx = json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(ctx) <= 10_000 and 'id="' in ctx and "later turn" in ctx


def test_user_prompt_submit_with_prompt_surfacing_off_and_nothing_enabled_is_silent(project, cli, tmp_path):
    proj, v = project
    _upload_entries(v)
    _enable_surface(v.root, enabled="false", prompt="false")
    r = _hook(cli, _event("UserPromptSubmit", proj, prompt="upload limit for big files"), cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
