"""Git through the ``git`` executable: every call a short-lived child that is always waited for, so a long-running
host never accumulates git processes or file descriptors (``docs/design.md`` gives the measurements behind this
choice over GitPython). A write's own status and commit run in-process where they can (``acpmem.vault.gitlib``).

A failing git command becomes one line (``failure``): git's own error lines, or, for the faults a person can fix
and git words obscurely, what is wrong and the next step — git not on PATH, a vault folder without ``.git``, a
corrupt ``.git/index``, no identity to commit with.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from acpmem.core.errors import GitStateError
from acpmem.core.values import Value

IDENTITY_ERRORS = ("Please tell me who you are", "identity unknown", "unable to auto-detect email address",
                   "empty ident name")
# Where git knows no identity, a command that makes a commit is run again with this one given on its command line
# (``git -c``): never written into any config, so a person's own identity counts as soon as there is one.
FALLBACK_IDENTITY = {"user.name": "acpmem", "user.email": "acpmem@localhost"}
_MAKES_COMMITS = frozenset({"commit", "merge", "pull", "revert", "cherry-pick", "am", "rebase"})
_supplied: set[str] = set()   # the vault roots whose commits took FALLBACK_IDENTITY in this process (``took_fallback``)


def identity_warning(root: Path) -> str:
    """What a person is told when a commit was recorded with ``FALLBACK_IDENTITY``."""
    return ("git has no user.name/user.email configured for this vault, so its commits are recorded as "
            f"{FALLBACK_IDENTITY['user.name']} <{FALLBACK_IDENTITY['user.email']}> until you set yours: "
            "`git config --global user.name 'Your Name'` and `git config --global user.email you@example.com` "
            f"(or `git -C {root} config …` for this vault alone)")


def took_fallback(root: Path) -> bool:
    """Whether a commit in the vault at ``root`` took the fallback identity since the last call (then cleared)."""
    key = str(root)
    if key in _supplied:
        _supplied.discard(key)
        return True
    return False


class GitResult(Value):
    code: int
    out: str
    err: str


def git(root: Path, *args: str, input: str | None = None, check: bool = True, env: dict | None = None) -> GitResult:
    """Run ``git -C root ARGS``: output captured, never a prompt, the C locale. ``check`` raises ``failure``'s
    ``GitStateError`` when it fails."""
    full_env = dict(os.environ)
    full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"})
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        full_env.pop(k, None)
    if env:
        full_env.update(env)
    try:
        def run(*extra: str):
            return subprocess.run(["git", *extra, "-C", str(root), *args], input=input, capture_output=True,
                                  text=True, encoding="utf-8", errors="replace", env=full_env,
                                  stdin=None if input else subprocess.DEVNULL)

        p = run()
        if p.returncode != 0 and args[:1] and args[0] in _MAKES_COMMITS and any(
                s in p.stderr + p.stdout for s in IDENTITY_ERRORS):
            # git refuses before it changes anything when it knows no identity: run it again with one, once
            p = run(*(x for k, v in FALLBACK_IDENTITY.items() for x in ("-c", f"{k}={v}")))
            if p.returncode == 0:
                _supplied.add(str(root))
    except FileNotFoundError:
        raise _not_found() from None
    res = GitResult(p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        raise failure(root, args, res)
    return res


def tracked(root: Path, path: str) -> list[str] | None:
    """The files git tracks under ``path`` (relative to the vault ``root``), though ``.gitignore`` may leave them
    out: ``[]`` where ``root`` is no repository; None where git cannot say (then nothing is to be taken as
    untracked)."""
    if not (root / ".git").exists():
        return []
    res = git(root, "ls-files", "-z", "--", path, check=False)
    if res.code != 0:
        return None
    return [name for name in res.out.split("\0") if name]


def fsck_options(git_dir: Path) -> list[str]:
    """``-c`` options for a ``git fsck`` of the repository whose git folder is ``git_dir``: where it has no
    commit-graph, no multi-pack-index and no alternates, fsck is told so, instead of starting a ``git commit-graph
    verify`` and a ``git multi-pack-index verify`` that would find nothing to check (2 processes, ~3 ms, a check)."""
    info = git_dir / "objects" / "info"
    if not (git_dir / "objects").is_dir() or (info / "alternates").exists() or (info / "commit-graph").exists() \
            or (info / "commit-graphs").exists() or (git_dir / "objects" / "pack" / "multi-pack-index").exists():
        return []
    return ["-c", "core.commitGraph=false", "-c", "core.multiPackIndex=false"]


def _not_found() -> GitStateError:
    return GitStateError("git was not found on PATH (reading the vault works without it; writing, sync and doctor "
                         "need it)", "install git or add it to PATH, then run the command again; nothing was changed "
                         "and pending requests are kept")


def require_git() -> None:
    """Raise ``git``'s not-found error now, before anything is changed, where no ``git`` is on PATH (a write whose
    status and commit run in-process still needs it: git's own answer to who commits, and the fallbacks)."""
    if shutil.which("git") is None:
        raise _not_found()


def error_text(res: GitResult) -> str:
    """What git said, on one line: its message lines up to the first blank line (after which git prints advice),
    without the ``fatal:``/``error:`` prefixes and ``hint:`` lines."""
    lines = []
    for line in (res.err.strip() or res.out.strip()).splitlines():
        line = line.strip()
        if not line:
            if lines:
                break
            continue
        if line.startswith("hint:"):
            continue
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                line = line[len(prefix):]
        lines.append(line)
    if not lines:
        return _said_nothing(res.code)
    text = "; ".join(dict.fromkeys(lines))   # a damaged pack makes git say the same line once per object
    return text if len(text) <= 400 else text[:399] + "…"


def _said_nothing(code: int) -> str:
    if code < 0:   # killed: git crashes on some damaged repositories (a corrupt multi-pack-index) without a word
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"git stopped on {name} without saying why (a damaged repository can crash it)"
    return f"git exited with status {code} without saying why"


def failure(root: Path, args: tuple[str, ...], res: GitResult, hint: str | None = None) -> GitStateError:
    """The error for a failed ``git ARGS`` in the vault at ``root``: a fault a person can fix, said as such, or git's
    own words with ``hint`` (default: run doctor)."""
    said = res.err + res.out
    if args[:1] != ("init",) and not (Path(root) / ".git").exists():
        return no_repository(Path(root))
    if index_corrupt(Path(root)):
        return GitStateError(f"the vault's git index {Path(root) / '.git' / 'index'} is corrupt "
                             f"(git {args[0]}: {error_text(res)})",
                             "run `acp memory doctor --fix` to rebuild it from the last commit (every file in the "
                             "folder is kept)")
    if any(s in said for s in IDENTITY_ERRORS):
        return GitStateError("git does not know who is committing in this vault (no user.name / user.email)",
                             f"set yours: git -C {root} config user.name 'Your Name' && git -C {root} config "
                             "user.email you@example.com")
    return GitStateError(f"git {args[0]} failed: {error_text(res)}",
                         hint or "run `acp memory doctor` to check the vault")


def git_dir(root: Path) -> Path:
    """The repository folder of the vault at ``root``: ``.git``, or where a ``.git`` file (``gitdir: …``) points."""
    dot = Path(root) / ".git"
    try:
        if dot.is_file():
            text = dot.read_text("utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                target = Path(text[7:].strip())
                return target if target.is_absolute() else (Path(root) / target)
    except OSError:
        pass
    return dot


def writes_blocked(root: Path) -> GitStateError | None:
    """Why no commit may be made in the vault now, or None: a sync merge, a rebase, a cherry-pick or revert is
    unfinished, or HEAD is detached (not on a branch). A commit made then would be acknowledged and lost when the
    operation is aborted or a branch is checked out, so every write refuses and pending requests wait."""
    root = Path(root)
    gd = git_dir(root)
    later = "pending writes are kept until then"
    if (gd / "MERGE_HEAD").exists():
        return GitStateError("a sync merge is unfinished in the vault (an entry changed on both sides)",
                             "edit the conflicted entries and run `acp memory sync` again, or "
                             f"`git -C {root} merge --abort`; {later}")
    if (gd / "rebase-merge").exists() or (gd / "rebase-apply").exists():
        return GitStateError("a git rebase is in progress in the vault: a commit made now would be lost if it is "
                             "aborted", f"finish it with `git -C {root} rebase --continue` or undo it with "
                                        f"`git -C {root} rebase --abort`, then run the command again; {later}")
    for name, op in (("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert")):
        if (gd / name).exists():
            return GitStateError(f"a git {op} is in progress in the vault",
                                 f"finish it with `git -C {root} {op} --continue` or undo it with "
                                 f"`git -C {root} {op} --abort`, then run the command again; {later}")
    try:
        head = (gd / "HEAD").read_text("utf-8", errors="replace").strip()
    except OSError:
        return None   # no repository: the writer says so in its own words
    if head and not head.startswith("ref:"):
        return GitStateError(f"the vault is not on a branch (detached HEAD at {head[:12]}): a commit made now "
                             "would be lost when a branch is checked out",
                             f"check out the vault's branch (`git -C {root} switch main`, or the branch it "
                             f"works on), then run the command again; {later}")
    return None


def no_repository(root: Path) -> GitStateError:
    return GitStateError(
        f"the vault {root} has no .git folder, so it has no history and cannot be written (reading works)",
        "restore its .git (or clone the team's vault again and copy your files into the clone), or start a new "
        f"history here: git -C {root} init -b main, then `acp memory doctor --fix`")


def index_corrupt(root: Path) -> bool:
    """Whether ``.git/index`` fails its own checks: the signature, and the checksum git keeps at its end (all zeros
    when ``index.skipHash`` is set). Read only after git failed, never on the way of a write."""
    try:
        data = (root / ".git" / "index").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    if len(data) < 12 + 20 or data[:4] != b"DIRC" or int.from_bytes(data[4:8], "big") not in (2, 3, 4):
        return True
    for size, algo in ((20, "sha1"), (32, "sha256")):
        tail = data[-size:]
        if tail == b"\0" * size or hashlib.new(algo, data[:-size]).digest() == tail:
            return False
    return True
