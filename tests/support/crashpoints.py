"""Crash points: run an acpmem command in a real child process and kill it (SIGKILL, by itself) just before its
``k``-th mutation step, or count its steps.

A step is what changes the vault (or the user vault) on disk: a file opened for writing, a rename or replace, a
link, a removal, a new folder, a truncation, an fsync (``acpmem.fsync``, raised by ``acpmem.infra.files``), a step of
the in-process git (``acpmem.git``: the index written, the tree written, the commit and its ref, raised by
``acpmem.vault.gitlib``), a ``git`` process that changes something (``add``, ``commit``, ``merge``, ``fetch``,
``push``, ``config`` set, …; read-only ones such as ``log`` or ``status`` are not steps) and a detached helper
started. They are seen through ``sys.addaudithook``: the same state gives the same steps in the same order, so a kill
point is a number, never a moment.

Used by ``tests/test_crash_points.py`` (every step of every write operation) and ``tests/test_journal.py``.
"""
from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]   # tests/

# The audit hook, run first in the child. ACPMEM_CRASH (JSON): "at" (kill before this step, 1-based; 0 never),
# "after" (kill at the first step after one whose description contains this text), "inside" (the folders whose
# changes count), "log" (write the steps seen here when the process exits normally).
HOOK = r"""
import json as _json, os as _os, sys as _sys
_steps = []
_sites = []
_armed = [False]
_W = _os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_TRUNC | _os.O_APPEND
_READ_GIT = {"log", "var", "status", "rev-parse", "ls-files", "ls-tree", "show", "cat-file", "diff", "merge-base",
             "rev-list", "for-each-ref", "symbolic-ref", "fsck", "check-ignore", "check-attr", "version",
             "name-rev", "describe", "show-ref", "count-objects", "diff-tree", "diff-index", "diff-files"}
_busy = [False]

def _in(path):
    try:
        p = _os.path.realpath(_os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return (p + _os.sep).startswith(_inside)

def _git_step(argv):
    argv = [str(a) for a in argv]
    if not argv or _os.path.basename(argv[0]) != "git":
        return None
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-C", "-c") else 1
    sub = argv[i] if i < len(argv) else ""
    rest = argv[i + 1:]
    if sub in _READ_GIT or (sub == "config" and any(a.startswith(("--get", "--list", "-l")) for a in rest)) \
            or (sub == "remote" and rest[:1] in (["get-url"], ["-v"], [])) \
            or (sub == "branch" and any(a in ("--show-current", "--list") for a in rest)) \
            or (sub == "hash-object" and "-w" not in rest):
        return None
    return "git " + sub

def _what(event, args):
    if event == "open":
        path, mode, flags = args
        if not isinstance(path, (str, bytes)) or not _in(path):
            return None
        if isinstance(mode, str) and mode:
            if not any(c in mode for c in "wax+") or (mode.startswith("r") and _os.path.exists(path)):
                return None
        elif not flags & _W or (not flags & (_os.O_TRUNC | _os.O_APPEND) and _os.path.exists(path)):
            return None   # an open that changes nothing by itself (a lock file that is there already)
        return "write " + _os.fsdecode(path)
    if event in ("os.rename", "os.link"):
        return (event[3:] + " " + _os.fsdecode(args[1])) if _in(args[0]) or _in(args[1]) else None
    if event in ("os.remove", "os.rmdir", "os.truncate"):
        return (event[3:] + " " + _os.fsdecode(args[0])) if _in(args[0]) else None
    if event == "os.mkdir":
        return ("mkdir " + _os.fsdecode(args[0])) if _in(args[0]) and not _os.path.isdir(args[0]) else None
    if event == "acpmem.fsync":
        return ("fsync " + args[0]) if _in(args[0]) else None
    if event == "acpmem.git":
        return ("libgit2 " + args[0] + " " + args[1]) if _in(args[1]) else None
    if event == "subprocess.Popen":
        return _git_step(args[1])
    if event == "os.posix_spawn":
        return "spawn a helper"
    return None

def _hook(event, args):
    if _busy[0] or not (event in ("open", "os.rename", "os.link", "os.remove", "os.rmdir", "os.truncate",
                                  "os.mkdir", "acpmem.fsync", "acpmem.git", "subprocess.Popen",
                                  "os.posix_spawn")):
        return
    _busy[0] = True
    try:
        what = _what(event, args)
    finally:
        _busy[0] = False
    if what is None:
        return
    _steps.append(what)
    if _cfg.get("log"):
        _sites.append(_site())
    if len(_steps) == _cfg["at"] or _armed[0]:
        _os.kill(_os.getpid(), 9)
    if _cfg.get("after") and _cfg["after"] in what:
        _armed[0] = True

def _site():
    # where in acpmem the step comes from: the three innermost frames outside the file layer and the git runner
    f, out = _sys._getframe(2), []
    while f is not None and len(out) < 3:
        fn = f.f_code.co_filename
        if "/acpmem/" in fn and "/acpmem/infra/" not in fn and not fn.endswith("/gitrun.py"):
            out.append(fn.rsplit("/acpmem/", 1)[1] + ":" + str(f.f_lineno))
        f = f.f_back
    return " < ".join(out)

def _save():
    if _cfg.get("log"):
        _busy[0] = True
        with open(_cfg["log"], "w") as f:
            _json.dump({"steps": _steps, "sites": _sites}, f)

"""

PRELUDE = HOOK + r"""
_cfg = _json.loads(_os.environ.pop("ACPMEM_CRASH"))
_inside = tuple(_os.path.realpath(p) + _os.sep for p in _cfg["inside"])
import atexit as _atexit
_atexit.register(_save)
_sys.addaudithook(_hook)
"""

CLI = PRELUDE + "\nfrom acpmem.cli.main import acp_main\nacp_main()\n"
WORKER = PRELUDE + "\nfrom acpmem.write.worker import worker_main\nworker_main(_sys.argv[1])\n"


class Run:
    """A finished child: exit code (negative: the signal), output, and with ``count`` the steps it took
    (``steps``) and where in acpmem each came from (``sites``: the innermost frames outside the file layer)."""

    def __init__(self, p: subprocess.CompletedProcess, log: dict | list | None) -> None:
        self.code, self.out, self.err = p.returncode, p.stdout, p.stderr
        if isinstance(log, dict):
            self.steps, self.sites = log["steps"], log["sites"]
        else:
            self.steps, self.sites = log, None

    @property
    def killed(self) -> bool:
        return self.code == -signal.SIGKILL


def run(argv: list[str], *, inside: list[Path], env: dict | None = None, at: int = 0, after: str | None = None,
        count: Path | None = None, code: str = CLI, cwd: Path | None = None, timeout: float = 120) -> Run:
    """``acp ARGV`` (or ``code`` with ARGV) in a child process, killed before step ``at`` (or right after the first
    step mentioning ``after``); with ``count``, the steps it took are read back from that file."""
    full = dict(os.environ if env is None else env)
    full["ACPMEM_CRASH"] = json.dumps({"at": at, "after": after, "inside": [str(p) for p in inside],
                                       "log": str(count) if count else None})
    full.setdefault("ACPMEM_NO_WATCH", "1")
    if count:
        count.unlink(missing_ok=True)
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=full, cwd=cwd,
                       timeout=timeout)
    log = json.loads(count.read_text()) if count and count.exists() else None
    return Run(p, log)


# --------------------------------------------------------------------------------------------- the zygote

# A process that imports acpmem once and forks a child per command: the child is a real process of its own (killed by
# SIGKILL like any other), without the ~0.3 s of interpreter start-up and imports each `acp` process pays. A child
# with a crash config installs the hook above first; one without runs the command plainly (the follow-ups).
#
# PRELOAD is what such a server imports and builds before it forks (also ``tests/support/launcher.py``'s server):
# a server that also runs the integrations (``acp memory serve``) sets ``_WITH_INTEGRATIONS = True`` before it.
PRELOAD = r"""
import importlib, json, os, pkgutil, sys
from acpmem.cli.startup import collect_less
collect_less()   # as the console scripts do before their modules load: the children stand for `acp` processes
import acpmem
for _m in pkgutil.walk_packages(acpmem.__path__, "acpmem."):   # every module, as a long-lived host has them
    if ".integrations." in _m.name and not globals().get("_WITH_INTEGRATIONS") \
            or _m.name.endswith(("__main__", "fastgen")):
        continue
    try:
        importlib.import_module(_m.name)
    except Exception:
        pass
import acpmem.cli.main
from acpmem.core.redact import redact
redact("warm-up AKIAIOSFODNN7EXAMPLE", deep=True)   # the secret scanner's plugins, loaded on first use
# and what the commands import on first use (found by comparing sys.modules before and after each command): each
# forked child would import it again, ~0.1 s a command
for _m in ("pygit2", "openai", "httpx", "typer._adapters", "typer._click.decorators", "Stemmer", "snowballstemmer",
           "h11", "httpcore2", "httpcore2._sync.connection_pool", "httpcore2._sync.http11", "truststore",
           "encodings.ascii", "encodings.utf_8_sig", "yaml", "tomllib", "gzip", "rapidfuzz.process",
           "rapidfuzz.distance.OSA", *(("anyio", "mcp_types", "mcp.server.lowlevel", "mcp.server.stdio",
                                        "mcp.shared.message", "mcp.shared.exceptions")
                                       if globals().get("_WITH_INTEGRATIONS") else ())):
    try:
        importlib.import_module(_m)
    except ImportError:
        pass
# the click command typer builds from every command's signature (``cli.main.typer_command``), ~50 ms a command that
# goes to typer: built once here, as a long-lived host builds it once; a child whose environment changes what typer
# reads while it builds builds its own (the cache's key)
acpmem.cli.main.typer_command("acp")
acpmem.cli.main.typer_command("acpmem")
# what a query builds on first use (alias tables, word lists, segmenter, stemmer), as the read server builds it before
# it forks readers: ~8 ms of every forked write that looks for duplicates
import acpmem.search.ranking
acpmem.search.ranking.prepare()
# the TLS context of the model calls (the CA store read and parsed: ~19 ms of every forked command that calls a
# model), which a long-lived host makes once and its forked children keep; each child makes its own HTTP client
import openai
import acpmem.write.llm
acpmem.write.llm._http_client(openai)


def git_config_from(home):
    # libgit2 found the global and XDG git config from HOME when pygit2 was imported here: from HOME again, where a
    # fresh process would look
    if "pygit2" in sys.modules and home:
        import pygit2
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        pygit2.settings.search_path[pygit2.enums.ConfigLevel.GLOBAL] = home
        pygit2.settings.search_path[pygit2.enums.ConfigLevel.XDG] = os.path.join(xdg, "git")
"""

ZYGOTE = PRELOAD + r"""
HOOK = sys.stdin.readline() and json.loads(sys.stdin.readline())
HOME = os.environ.get("HOME", "")


def inline(job):
    # the command in this process (``Zygote(inline=True)``): what a forked child gets — its environment, folder,
    # argv, nothing on standard input, its output in files — and all of it put back afterwards
    import io
    import traceback
    saved_env, saved_cwd, saved_argv, saved_in = dict(os.environ), os.getcwd(), sys.argv, sys.stdin
    sys.stdout.flush(); sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    code = 99
    try:
        fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 0); os.close(fd)
        for target, name in ((1, "out"), (2, "err")):
            fd = os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644); os.dup2(fd, target); os.close(fd)
        sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")   # not the jobs still buffered here
        os.environ.clear(); os.environ.update(job["env"])
        os.chdir(job["cwd"])
        git_config_from(os.environ.get("HOME", ""))
        sys.argv = ["acp", *job["argv"]]
        try:
            code = acpmem.cli.main.main(job["argv"], "acp")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 99
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        for fd, old in zip((0, 1, 2), saved):
            os.dup2(old, fd); os.close(old)
        sys.stdin, sys.argv = saved_in, saved_argv
        os.chdir(saved_cwd)
        os.environ.clear(); os.environ.update(saved_env)
        git_config_from(HOME)
    return (code & 0xFF) << 8    # as waitpid reports an exit

import gc
gc.freeze()   # what the children share with this process stays out of their collections: fewer pages copied


for line in sys.stdin:
    job = json.loads(line)
    if job.get("inline"):
        sys.stdout.write(json.dumps({"status": inline(job)}) + "\n")
        sys.stdout.flush()
        continue
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 0)
            out = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644); os.dup2(out, 1)
            err = os.open(job["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644); os.dup2(err, 2)
            os.environ.clear(); os.environ.update(job["env"])
            os.chdir(job["cwd"])
            git_config_from(os.environ.get("HOME", ""))
            sys.argv = ["acp", *job["argv"]]
            g = {"__name__": "__crash__"}
            if job["cfg"] is not None:
                exec(HOOK, g)
                g["_cfg"] = job["cfg"]
                g["_inside"] = tuple(os.path.realpath(p) + os.sep for p in job["cfg"]["inside"])
                sys.addaudithook(g["_hook"])
            if job.get("prelude"):
                exec(job["prelude"], g)    # beside the hook: it may read the steps counted so far
            code = 0
            try:
                if job["what"] == "worker":
                    from acpmem.write.worker import worker_main
                    worker_main(job["argv"][0])
                else:
                    acpmem.cli.main.acp_main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            sys.stdout.flush(); sys.stderr.flush()
            if job["cfg"] is not None:
                g["_save"]()
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 99
        finally:
            os._exit(code if "code" in dir() else 98)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"status": status}) + "\n")
    sys.stdout.flush()
"""


class Zygote:
    """``Zygote(env)`` starts the forking server; ``run(...)`` as the module's ``run``, through a forked child.

    ``Zygote(env, scratch, inline=True)``: a server that runs each command in its own process instead, one after
    another, with the environment, folder, argv and standard streams a forked child would have (put back after each)
    — for the commands that are neither killed nor watched step by step (the follow-ups after a kill), where a fork
    per command cost more than the command (~14 ms of a 17 ms ``list``: the pages the child copies, its exit)."""

    def __init__(self, env: dict, scratch: Path, inline: bool = False) -> None:
        self.env = dict(env, ACPMEM_NO_WATCH="1")
        self.scratch = scratch
        self.inline = inline
        self.n = 0
        self.p = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=self.env, cwd=str(scratch))
        self.p.stdin.write("hook\n" + json.dumps(HOOK) + "\n")
        self.p.stdin.flush()

    def run(self, argv: list[str], *, inside: list[Path] = (), env: dict | None = None, at: int = 0,
            after: str | None = None, count: bool = False, crash: bool = True, what: str = "cli",
            cwd: Path | None = None, prelude: str | None = None, whole_env: bool = False) -> Run:
        """``prelude``: code the child runs before the command (after the crash hook), e.g. an audit hook of its
        own; ``whole_env``: ``env`` is the child's whole environment, not additions to the server's."""
        self.n += 1
        out, err, log = (self.scratch / f"{self.n}.{x}" for x in ("out", "err", "steps"))
        cfg = {"at": at, "after": after, "inside": [str(p) for p in inside], "log": str(log) if count else None} \
            if crash else None
        full = dict(env or {}) if whole_env else dict(self.env, **(env or {}))
        job = {"argv": [str(a) for a in argv], "env": full, "cfg": cfg, "out": str(out), "err": str(err),
               "cwd": str(cwd or self.scratch), "what": what, "prelude": prelude, "inline": self.inline}
        if self.inline and (cfg is not None or prelude or what != "cli"):
            raise ValueError("an inline server runs plain commands: no crash hook, prelude or worker")
        self.p.stdin.write(json.dumps(job) + "\n")
        self.p.stdin.flush()
        status = json.loads(self.p.stdout.readline())["status"]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        saved = json.loads(log.read_text()) if count and log.exists() else None
        r = Run(subprocess.CompletedProcess(argv, code, out.read_text(errors="replace"),
                                            err.read_text(errors="replace")), saved)
        for f in (out, err, log):
            f.unlink(missing_ok=True)
        return r

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=60)


_SERVERS: dict[bool, Zygote] = {}


def server(inline: bool = False) -> Zygote:
    """This process's forking server for the tests that need a real process per command (``inline``: its server
    that runs plain commands in its own process, ``Zygote(inline=True)``): started on first use, ended (and its
    scratch folder removed) when this process exits."""
    import atexit
    import tempfile

    z = _SERVERS.get(inline)
    if z is None or z.p.poll() is not None:
        scratch = Path(tempfile.mkdtemp(prefix="acpmem-forks-"))
        z = _SERVERS[inline] = Zygote(dict(os.environ), scratch, inline=inline)

        def close(z: Zygote = z) -> None:
            import shutil

            z.close()
            shutil.rmtree(z.scratch, ignore_errors=True)
        atexit.register(close)
    return z


def forked(argv: list[str], *, inside: list[Path] = (), env: dict | None = None, at: int = 0,
           after: str | None = None, count: bool = False, crash: bool = True, prelude: str | None = None,
           cwd: Path | None = None, no_watch: bool = True) -> Run:
    """``run``, in a child forked from ``server()``: the same hook, so the same steps, in the environment
    (``env``, else this process's; with ``ACPMEM_NO_WATCH=1`` unless ``no_watch`` is false) and folder (``cwd``,
    else this process's) a fresh process would have; ``prelude`` runs beside the hook before the command."""
    full = dict(os.environ if env is None else env)
    if no_watch:
        full.setdefault("ACPMEM_NO_WATCH", "1")
    return server().run([str(a) for a in argv], inside=inside, env=full, whole_env=True, at=at, after=after,
                        count=count, crash=crash, prelude=prelude, cwd=cwd or Path.cwd())


def inline(argv: list[str], *, env: dict | None = None, cwd: Path | None = None, no_watch: bool = True) -> Run:
    """A command that is neither killed nor counted, in ``server(inline=True)``: with the environment (``env``,
    else this process's; ``ACPMEM_NO_WATCH=1`` unless ``no_watch`` is false), folder and output files a forked
    child would have, without the fork (most of a short command's cost)."""
    full = dict(os.environ if env is None else env)
    if no_watch:
        full.setdefault("ACPMEM_NO_WATCH", "1")
    return server(inline=True).run([str(a) for a in argv], env=full, whole_env=True, crash=False,
                                   cwd=cwd or Path.cwd())


def helpers_of(root: Path) -> list[int]:
    """The detached helpers (worker, embedding pass, watcher) a command left running for the vault at ``root``."""
    needle = repr(str(root)).encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            if needle not in cmd or b"worker_main(" not in cmd:
                continue    # most processes: one read, not two (called after every step of every kill point)
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(int(d))
    return out


# --------------------------------------------------------------------------------------------- distinct kill points

_TEMP = re.compile(r"\.\d+\.[0-9a-f]{8}\.tmp\b")            # atomic_write's temp files: .NAME.PID.RANDOM.tmp
_OBJECT = re.compile(r"objects/[0-9a-f]{2}/[0-9a-f]{6,}")    # a loose git object
_GIT_TEMP = re.compile(r"(tmp_obj_|tmp_pack_|tmp_idx_)\w+")


def step_kind(step: str, where: Path) -> str:
    """A step without what differs between runs of the same state: the copy's folder, a temp file's pid and random
    part, an object's hash."""
    s = step.replace(str(where), "<copy>")
    s = _TEMP.sub(".<pid>.tmp", s)
    s = _OBJECT.sub("objects/<object>", s)
    return _GIT_TEMP.sub(r"\1<tmp>", s)


def distinct_points(steps: list[str], sites: list[str], where: Path) -> list[int]:
    """The kill points (1-based step numbers) that stand for all: the first step of each distinct (kind of step,
    file, call site) — a step repeated at the same place in the code on the same file leaves the same kind of state
    behind (e.g. the pack files git writes one after another)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for k, (step, site) in enumerate(zip(steps, sites), 1):
        key = (step_kind(step, where), site)
        if key not in seen:
            seen.add(key)
            out.append(k)
    return out
