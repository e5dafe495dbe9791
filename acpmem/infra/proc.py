"""Questions about processes: is this pid alive, does anyone hold this file open (Linux ``/proc``), and whether this
one runs a single command and ends."""
from __future__ import annotations

import os
from pathlib import Path

# Whether this process runs one command and ends: set by the console scripts for every command but the reads and the
# MCP server (``acpmem.cli.main``). Its writes then commit through the ``git`` executable unless pygit2 is loaded
# already, since loading it costs such a process more than the few git processes of its commits
# (``acpmem.vault.gitlib``). A process that stays — the MCP server, the worker, a program using acpmem — loads it
# once and commits in process.
one_command = False


def read_pid(path: Path) -> int | None:
    """The pid written at the start of a file (a lock file, a marker), or None."""
    try:
        return int(Path(path).read_text("ascii").split()[0])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None


def pid_alive(pid: int | None) -> bool:
    """Whether a process other than this one runs with this pid (a zombie, killed but not yet reaped, counts as
    gone)."""
    if not pid or pid == os.getpid():
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def held_open(path: Path) -> bool:
    """Whether any process has ``path`` open (Linux /proc; elsewhere: unknown, say no)."""
    target = os.path.realpath(path)
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    return False
