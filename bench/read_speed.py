"""Whole-process timing of the commands a model or a hook may run every turn: `show ID`, `surface` (by score, and by
the user's message with `--prompt`, as pi's and DSH's per-prompt hooks call it, on a session's first turn and on a
later one, when the session has seen 95 entries, and with a word the index lacks), `hook claude-code` on a user's
prompt (the per-prompt hook of Claude Code, Codex and Gemini CLI), `score`, `stats`, `list`, `list --format prompt`
(fresh and frozen for a session) and `recall` (at 1,000 entries and, with ``--recall-entries``, at 10,000, where
`show` and `list --format prompt` are timed too), each as a ratio to the same run's `python -c pass`, beside its
target (3x for the per-turn reads at 1,000 entries, 4x for `recall` at 10,000). With ``--recall-text locomo10.json``, `recall` is also timed in a vault of the same size
written from real conversations (``bench/text_vault.py``), asked LoCoMo's own questions: the generated entries share
27 words, so every query word is in most of them and a search scores nearly the whole vault (the worst case); real
text is not like that. In that vault `surface --prompt` is also timed with a long prompt, 2,000 characters of
LoCoMo's dialogue (a pasted chat log: a hundred words and more).

Builds a vault of generated entries (``bench/list_speed.py``'s generator), warms its derived caches once, then runs
the commands round-robin as fresh processes (so a busy machine slows them all alike) and prints, for each, the
median wall time and the median CPU time (user + system of the child, steadier than wall time on a loaded machine),
both also as a multiple of `python -c pass`. The modules' .pyc files are written by the warm-up run, as an
installed package has them (``PYTHONDONTWRITEBYTECODE`` is dropped for the commands). The user vault is turned off (``ACPMEM_USER_VAULT=none``) unless
``--user`` builds one of the same size beside it. ``--typer`` measures the typer path too (``ACPMEM_NO_FASTPATH=1``).

Each command is measured twice: run alone (``ACPMEM_READ_SERVER=0``) and, marked "(served)", handed to the read
server (``acpmem.cli.relay``), started by the warm-up in a folder of this run and ended at its end. A served
command's CPU time is its client's, plus the server's child's (which the client reports), plus the server's own
from just before the command to just before the next served one (``/proc/PID/schedstat``): accepting and checking
the request, the fork, and holding what the child reported after it ended. ``--no-server`` leaves these rows out.

Run it from an installed package (``pip install .`` in a fresh venv): an editable install (``pip install -e``) has
every python start import its finder, `python -c pass` included, which halves the ratios; the script says so when
it finds one.

    python bench/read_speed.py [--entries 1000] [--recall-entries 10000] [--recall-text LOCOMO_JSON] [--runs 15]
                              [--keep DIR] [--user] [--typer] [--no-server]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from list_speed import build  # noqa: E402
from text_vault import build as build_text, long_prompts, questions, read_locomo  # noqa: E402

from acpmem.search import catalog  # noqa: E402


SEEN = 95   # a long session's ledger: its later prompts search for the 5 shown and as many as it has seen
LONG = "long prompt"   # its row has no target: the targets are for the per-turn reads at 1,000 entries


def seen_session(root: Path, session: str, ids: list[str]) -> str:
    """``session``, new, with a surfacing ledger that says it has seen (been surfaced) ``ids``: the state a
    session's later turns find (written before the timed run)."""
    from acpmem.read.ledger import write_ledger
    from acpmem.vault.discovery import session_folder

    sdir = session_folder(root / ".acpmem", session)
    sdir.mkdir(parents=True, exist_ok=True)
    write_ledger(sdir, {"surfaced": ids, "recalled": [], "used_bytes": 0})
    return session


def timed(cmd: list[str] | tuple[list[str], bytes], env: dict) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run of ``cmd`` (a command line, or one with what it reads on standard input)."""
    cmd, stdin = cmd if isinstance(cmd, tuple) else (cmd, None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--keep", type=Path, help="build the vault here and keep it")
    ap.add_argument("--user", action="store_true", help="a user vault of the same size beside it")
    ap.add_argument("--typer", action="store_true", help="also measure the typer path (ACPMEM_NO_FASTPATH=1)")
    ap.add_argument("--no-server", action="store_true",
                    help="leave out the rows run by the read server (ACPMEM_READ_SERVER=1)")
    ap.add_argument("--recall-entries", type=int, default=10000,
                    help="a second vault of this size for `recall` (0: none)")
    ap.add_argument("--recall-text", type=Path, metavar="LOCOMO_JSON",
                    help="also `recall` in a vault of --recall-entries entries written from LoCoMo's conversations "
                         "(bench/text_vault.py), asked LoCoMo's questions: a real vocabulary")
    args = ap.parse_args()
    if args.entries < 1 or args.runs < 1 or args.recall_entries < 0:
        ap.error("--entries and --runs must be at least 1, --recall-entries at least 0 (0: no recall vault)")
    if args.recall_text is not None and (not args.recall_text.is_file() or not args.recall_entries):
        ap.error(f"--recall-text {args.recall_text}: pass the path of locomo10.json, with --recall-entries above 0")
    pasted: list[str] = []
    if args.recall_text is not None:
        try:
            read_locomo(args.recall_text)
        except ValueError as exc:
            ap.error(f"--recall-text: {exc}")
        pasted = long_prompts(args.recall_text, 2000, 10)
        if not pasted:
            ap.error(f"--recall-text {args.recall_text}: it holds no dialogue turns to paste as the long prompt "
                     "(LoCoMo's locomo10.json has thousands)")
    if args.keep is not None and args.keep.exists() and not args.keep.is_dir():
        ap.error(f"--keep {args.keep} is a file: pass a folder (made if missing) to build the vaults in")
    n = args.entries
    acp = str(Path(sys.executable).parent / "acp")
    base = args.keep or Path(tempfile.mkdtemp(prefix="acpmem-bench-"))
    root, user = base / f"v{n}", base / f"u{n}"
    built = False
    for path, is_user in ((root, False),) + (((user, True),) if args.user else ()):
        if not (path / "entries").is_dir():
            build(path, n, seed=2 if is_user else 1, user=is_user)
            built = True
    big = base / f"v{args.recall_entries}" if args.recall_entries else None
    if big is not None and not (big / "entries").is_dir():
        build(big, args.recall_entries, seed=3)
        built = True
    text = base / f"t{args.recall_entries}" if args.recall_text else None
    if text is not None and not (text / "entries").is_dir():
        build_text(text, args.recall_text, args.recall_entries)
        built = True
    if built:   # the steady state a later turn sees (no racily clean rows), once for every vault just built
        time.sleep(catalog.RACY_NS / 1e9)
    env = {**os.environ, "ACPMEM_USER_VAULT": str(user) if args.user else "none", "ACPMEM_READ_SERVER": "0"}
    env.pop("ACPMEM_NO_FASTPATH", None)
    # an installed acpmem has its modules compiled (.pyc): without them every run compiles the sources again
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    names = sorted(p.name for p in (root / "entries").glob("*.md"))
    first = names[0][:6]
    seen = [name[:6] for name in names[-SEEN:]]
    v = ["--vault", str(root)]
    runs = iter(range(10**9))
    commands = {
        "show ID": lambda: [acp, "memory", "show", first, *v],
        "surface --session": lambda: [acp, "memory", "surface", "--session", f"bench-{next(runs)}", *v],
        "surface --session --prompt": lambda: [acp, "memory", "surface", "--session", f"bench-{next(runs)}",
                                               "--prompt", "why does the deploy gateway retry?", *v],
        # a later turn: the session has seen SEEN entries, so the prompt's search asks for that many more (to
        # find the new ones among them), as on every turn of a long session
        f"surface --prompt, {SEEN} seen": lambda: [
            acp, "memory", "surface", "--session", seen_session(root, f"bench-seen-{next(runs)}", seen),
            "--prompt", "why does the deploy gateway retry?", *v],
        # a prompt with a word the index lacks ("flaky"), as nearly every real prompt has one: it is looked up as
        # a typo and a prefix (the generated vault's prompts above use its own words only)
        "surface --prompt, a new word": lambda: [acp, "memory", "surface", "--session", f"bench-{next(runs)}",
                                                 "--prompt", "why does the flaky deploy gateway retry?", *v],
        "score": lambda: [acp, "memory", "score", *v],
        "stats": lambda: [acp, "memory", "stats", *v],
        "list": lambda: [acp, "memory", "list", *v],
        "list --format prompt": lambda: [acp, "memory", "list", "--format", "prompt", *v],
        "list --format prompt --session": lambda: [acp, "memory", "list", "--format", "prompt", "--session", "S1",
                                                   *v],
        f"recall ({n:,})": lambda: [acp, "memory", "recall", "deploy gateway retry", *v],
        # the hook of Claude Code, Codex and Gemini CLI on the user's prompt (a session's first turn)
        "hook claude-code, a prompt": lambda: ([acp, "memory", "hook", "claude-code", *v], json.dumps({
            "hook_event_name": "UserPromptSubmit", "session_id": f"bench-hook-{next(runs)}",
            "prompt": "why does the deploy gateway retry?", "cwd": str(root)}).encode()),
    }
    untargeted: set[str] = set()   # rows timed with no target (and the long prompt's)
    if big is not None:
        commands[f"recall ({args.recall_entries:,})"] = lambda: [acp, "memory", "recall", "deploy gateway retry",
                                                                 "--vault", str(big)]
        # the same vault's `show` and resident index (no target: theirs are at --entries; from 5,000 entries on, a
        # vault's watcher spares them the look at every entry file, as it spares recall)
        big_first = min(p.stem for p in (big / "entries").glob("*.md")).split("-")[0]   # (an id has no "-")
        commands[f"show ID ({args.recall_entries:,})"] = lambda: [acp, "memory", "show", big_first, "--vault",
                                                                  str(big)]
        commands[f"list --format prompt ({args.recall_entries:,})"] = lambda: [
            acp, "memory", "list", "--format", "prompt", "--vault", str(big)]
        untargeted |= {f"show ID ({args.recall_entries:,})", f"list --format prompt ({args.recall_entries:,})"}
    if text is not None:
        asked = questions(args.recall_text, 10)
        commands[f"recall ({args.recall_entries:,}, LoCoMo)"] = lambda: [
            acp, "memory", "recall", asked[next(runs) % len(asked)], "--vault", str(text)]
        # a long prompt (a pasted chat log): surfacing searches its first 2,000 characters, a hundred words or more
        commands[f"surface, {LONG} ({args.recall_entries:,})"] = lambda: [
            acp, "memory", "surface", "--session", f"bench-long-{next(runs)}", "--prompt",
            pasted[next(runs) % len(pasted)], "--vault", str(text)]
    cases = [("python -c pass", lambda: [sys.executable, "-c", "pass"], env)]
    cases += [(name, make, env) for name, make in commands.items()]
    if args.typer:
        slow = {**env, "ACPMEM_NO_FASTPATH": "1"}
        cases += [(f"{name} (typer)", make, slow) for name, make in commands.items()]
    run_dir = base / "run"
    cpu_log = base / "served-cpu.log"
    if not args.no_server:
        run_dir.mkdir(mode=0o700, exist_ok=True)
        warm = {**env, "ACPMEM_READ_SERVER": "1", "XDG_RUNTIME_DIR": str(run_dir), "ACPMEM_READ_SERVER_CPU_LOG":
                str(cpu_log)}
        cases += [(f"{name} (served)", make, warm) for name, make in commands.items()]
    for _, make, e in cases:   # warm the derived caches (and the OS's file cache) once; start the read server
        timed(make(), e)
    if not args.no_server:
        until = time.monotonic() + 60
        while not list((run_dir / "acpmem").glob("read-*.sock")) and time.monotonic() < until:
            time.sleep(0.05)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
    server: list[int] = []
    if not args.no_server:   # (a second server a warm-up client started ends as soon as it finds the lock taken)
        until = time.monotonic() + 30
        while len(server := _servers(run_dir)) != 1 and time.monotonic() < until:
            time.sleep(0.05)
        if len(server) != 1:
            sys.exit(f"expected one read server under {run_dir}, found {len(server)} (see {run_dir}/acpmem/*.log)")
    # the server's own CPU time for a served command: from just before it to just before the next served one, so
    # that what the server does after the child ends (holding what the child reported) counts too
    pending: tuple[list, int, int] | None = None    # (the command's rows, its row, the server's CPU ns before it)
    try:
        for _ in range(args.runs):
            for name, make, e in cases:
                served = name.endswith("(served)")
                if served:
                    now = _server_ns(server[0])
                    if pending is not None:
                        rows, i, was = pending
                        rows[i] = (rows[i][0], rows[i][1] + (now - was) / 1e6)
                before = _served_cpu(cpu_log)
                wall, cpu = timed(make(), e)
                if served:
                    after = _served_cpu(cpu_log)
                    if after[0] != before[0] + 1:
                        sys.exit(f"`{name}` was not run by the read server (see {run_dir}/acpmem/*.log)")
                    cpu += (after[1] - before[1]) / 1000   # the server's child ran it: its CPU time counts
                    pending = (got[name], len(got[name]), now)
                got[name].append((wall, cpu))
        if pending is not None:
            time.sleep(0.5)   # what the server does after the last child: done by now, even on a busy machine
            rows, i, was = pending
            rows[i] = (rows[i][0], rows[i][1] + (_server_ns(server[0]) - was) / 1e6)
    finally:
        _end_servers(run_dir)
    wall0 = statistics.median(w for w, _ in got["python -c pass"])
    cpu0 = statistics.median(c for _, c in got["python -c pass"])
    print(f"python {sys.version.split()[0]}, {n} entries{' + a user vault of as many' if args.user else ''}, "
          f"runs={args.runs} (median, whole process, round-robin)")
    print(f"{'command':<34}{'wall':>9}{'ratio':>8}{'cpu':>9}{'ratio':>8}{'target':>8}")
    for name, rows in got.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        target = ("" if name == "python -c pass" or "typer" in name or name.split(" (")[0] in ("score", "stats")
                  or LONG in name or name.removesuffix(" (served)") in untargeted
                  else "4x" if name.startswith("recall")
                  else "3x")
        print(f"{name:<34}{wall:>6.0f} ms{wall / wall0:>7.1f}x{cpu:>6.0f} ms{cpu / cpu0:>7.1f}x{target:>8}")
    for line in TICKS:
        print(line)
    editable = editable_finders()
    if editable:
        print(f"note: this environment installs {', '.join(editable)} in editable mode (pip install -e): every python "
              "start here imports its finder at start-up (pathlib, re, importlib.util: ~10 ms), `python -c pass` "
              "included, so the ratios above are lower than an installed package's. For the figure a user sees, "
              "run this script from a venv with `pip install .`")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


def _served_cpu(log: Path) -> tuple[int, int]:
    """(commands the read server ran, their CPU microseconds) as its clients wrote them to ``log``."""
    try:
        rows = log.read_text().split()
    except FileNotFoundError:
        return 0, 0
    return len(rows), sum(int(r) for r in rows)


def _servers(run_dir: Path) -> list[int]:
    """The read servers whose socket is under ``run_dir`` (the ones this run started)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"acpmem.cli.readserver" in argv and any(str(run_dir).encode() in a for a in argv):
                found.append(int(d))
    return found


TICKS: list[str] = []   # said when the server's CPU time could only be read in clock ticks


def _server_ns(pid: int) -> int:
    """The CPU time the read server ``pid`` has used, in nanoseconds: from ``/proc/PID/schedstat`` (exact), else
    from ``/proc/PID/stat`` in clock ticks (10 ms, longer than a served command's share: the medians then miss it)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        sys.exit(f"the read server {pid} ended during the run (see its log under the run's folder)")
    if not TICKS:
        TICKS.append("note: this kernel has no /proc/PID/schedstat: the read server's own CPU time is read in clock "
                     "ticks, which the served rows' medians miss")
    return (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")


def _end_servers(run_dir: Path) -> None:
    """End the read servers whose socket is under ``run_dir`` (the ones this run started)."""
    import signal

    for pid in _servers(run_dir):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def editable_finders(dirs: list[str] | None = None) -> list[str]:
    """The distributions this interpreter's site-packages (or ``dirs``) install in editable mode (a
    ``__editable__*.pth`` that imports a finder at every start-up)."""
    import site

    found = []
    for d in site.getsitepackages() if dirs is None else dirs:
        for pth in sorted(Path(d).glob("__editable__*.pth")):
            if "import " in pth.read_text(errors="replace"):
                found.append(pth.stem.removeprefix("__editable__.").split("-")[0])
    return found


if __name__ == "__main__":
    main()
