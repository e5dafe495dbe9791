"""Process helpers for the reliability tests: writer processes that record acknowledgements, and probes of a vault's
git state (what HEAD holds, commit counts, leftover locks and temp files, fsck, every byte stored under .git).

Also runnable as a script (``python tests/support/helpers_proc.py write VAULT TAG N ACKFILE``) so the tests can start real,
independent writer processes and kill them with ``kill -9``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]   # tests/
PINNED = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


def wait_until(cond, timeout: float = 60.0):
    """Poll ``cond`` every 0.1 s until it returns something true, and return that; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {getattr(cond, '__name__', cond)}")


def flock_held(path: Path) -> bool:
    """Whether any process holds a ``flock`` on the file at ``path``, read from ``/proc/locks`` — looked at, never
    taken: trying the lock would, for that moment, make a worker starting beside the test believe one runs."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    dev_ino = f" {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "   # a field of its own
    with open("/proc/locks") as f:
        return any(" FLOCK " in line and dev_ino in line for line in f)


def git_env() -> dict:
    env = dict(os.environ)
    env.update({"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"})
    return env


def git_out(root: Path, *args: str, check: bool = True) -> str:
    p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=git_env(), timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[:500]}")
    return p.stdout


def git_bytes(root: Path, *args: str) -> bytes:
    p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, env=git_env(), timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({p.returncode}): {p.stderr[:500]!r}")
    return p.stdout


def make_entry(ident: str, title: str, body: str, *, importance: int = 5, typ: str = "fact"):
    from acpmem.core.entry import Citation, Entry

    return Entry(id=ident, title=title, type=typ, importance=importance, created="2026-11-29T12:00:00Z",
                 body=body if body.endswith("\n") else body + "\n", citation=(Citation("s-test", 1),))


def ack(path: Path, line: str) -> None:
    """Record one acknowledgement with a single O_APPEND write, fsynced (it must survive our own kill -9)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_acks(path: Path) -> list[list[str]]:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    return [ln.split("\t") for ln in text.splitlines() if ln.strip()]


def writer(vault_root: str, tag: str, n: int, ack_path: str, ready: bool = False) -> None:
    """Write ``n`` entries, one ``write_entries`` call each; ack ``id<TAB>path<TAB>sha`` after each returns. With
    ``ready``, a line ``ready`` on standard output once the vault is open, before the first write."""
    from acpmem.vault.writer import Vault

    v = Vault(Path(vault_root), clock=lambda: PINNED)
    if ready:
        print("ready", flush=True)
    try:
        for i in range(n):
            ident = f"{tag}n{i:03d}"
            e = make_entry(ident, f"Writer {tag} note {i}", f"Body of {ident}: writer {tag} wrote note {i}.")
            rel = v.path_for(ident, e.title)
            sha = v.write_entries([e.with_changes(path=rel)], subject=f"add #{ident}", why="reliability test")
            ack(Path(ack_path), f"{ident}\t{rel}\t{sha}")
    finally:
        v.close()


def editor(vault_root: str, ident: str, tag: str, n: int, ack_path: str) -> None:
    """Append ``n`` lines to one entry's body by read-modify-write (``replace_entry_text``), retrying when another
    process changed the entry meanwhile; ack ``tag-i`` after each returns."""
    from acpmem.core.errors import AcpmemError
    from acpmem.vault.writer import KIND_EDIT, Vault

    v = Vault(Path(vault_root), clock=lambda: PINNED)
    try:
        for i in range(n):
            for _ in range(400):
                e = v.resolve(ident)
                text = v.entry_path(e).read_bytes().decode("utf-8")
                try:
                    v.replace_entry_text(e, text + f"- {tag} line {i}\n", subject=f"edit #{ident}",
                                         why=f"{tag} {i}", kind=KIND_EDIT, base=text)
                    break
                except AcpmemError as exc:
                    if "changed while" not in exc.message:
                        raise
            else:
                raise SystemExit(f"{tag}: gave up on line {i}")
            ack(Path(ack_path), f"{tag}-{i}")
    finally:
        v.close()


def superseder(vault_root: str, target: str, tag: str, ack_path: str, retries: int = 200) -> None:
    """Write a new entry that supersedes ``target`` (marking it), retrying when the target changed meanwhile;
    ack ``ok<TAB>new-id`` or record the refusal."""
    from acpmem.core.errors import AcpmemError
    from acpmem.vault.writer import KIND_SUPERSEDE, Vault

    v = Vault(Path(vault_root), clock=lambda: PINNED)
    try:
        ident = f"{tag}sup"
        new = make_entry(ident, f"Replacement {tag}", f"{tag} replaces {target}.").with_changes(
            supersedes=(target,), path=v.path_for(ident, f"Replacement {tag}"))
        for _ in range(retries + 1):
            old = v.resolve(target)  # from the catalog, without its text: write_entries re-reads it under the lock
            try:
                v.write_entries([new], updates=[old.with_changes(superseded_by=ident)],
                                subject=f"supersede #{target}", why=tag, kind=KIND_SUPERSEDE)
                break
            except AcpmemError as exc:
                if "changed while" not in exc.message:
                    raise
        else:
            ack(Path(ack_path), f"refused\t{ident}")
            return
        ack(Path(ack_path), f"ok\t{ident}")
    finally:
        v.close()


def reader(vault_root: str, ident: str, n: int) -> None:
    """Read one entry ``n`` times the way recall/show do (marks it read)."""
    from acpmem.vault import reader
    from acpmem.vault.writer import Vault

    v = Vault(Path(vault_root), clock=lambda: PINNED)
    try:
        for _ in range(n):
            assert reader.show(v, ident).id == ident
            reader.list_entries(v)
    finally:
        v.close()


def start(*args: object) -> subprocess.Popen:
    """Run one of this module's commands (write / edit / supersede / read) as a separate process."""
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_writer(vault_root: Path, tag: str, n: int, ack_path: Path) -> subprocess.Popen:
    return start("write", vault_root, tag, n, ack_path)


# --------------------------------------------------------------------------------------------- probes

def head_files(root: Path) -> set[str]:
    return set(filter(None, git_out(root, "ls-tree", "-r", "--name-only", "-z", "HEAD").split("\0")))


def head_texts(root: Path, *paths: str) -> dict[str, str]:
    """The files at ``paths`` as HEAD holds them (``git show HEAD:PATH`` each), in one ``git cat-file --batch``."""
    asked = "".join(f"HEAD:{x}\n" for x in paths).encode()
    p = subprocess.run(["git", "-C", str(root), "cat-file", "--batch"], input=asked, capture_output=True,
                       env=git_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    got, at = {}, 0
    for path in paths:
        end = p.stdout.index(b"\n", at)
        header = p.stdout[at:end].split()
        assert len(header) == 3 and header[1] == b"blob", (path, header)
        size = int(header[2])
        got[path] = p.stdout[end + 1:end + 1 + size].decode()
        at = end + 1 + size + 1
    return got


def object_types(root: Path, *specs: str) -> dict[str, str | None]:
    """What each of ``specs`` (``REV:PATH`` and the like) names in the repository — ``blob``, ``tree``, … or None
    where it names nothing — in one ``git cat-file --batch-check``, not a process each."""
    asked = "".join(f"{x}\n" for x in specs).encode()
    p = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-check=%(objecttype)"], input=asked,
                       capture_output=True, env=git_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    answers = p.stdout.decode().splitlines()
    assert len(answers) == len(specs), (len(answers), len(specs))
    return {x: None if a.endswith(" missing") or a.endswith(" ambiguous") else a for x, a in zip(specs, answers)}


def commit_count(root: Path) -> int:
    return int(git_out(root, "rev-list", "--count", "HEAD").strip())


def copy_tree(src: Path, dst: Path) -> Path:
    """``dst`` as a copy of the folder ``src`` — contents, modes, times, links as links — made by ``cp -a``: for a
    small folder about the CPU of ``shutil.copytree``, for a template copied at every kill point half (one process
    copying in C against a Python call or three a file)."""
    subprocess.run(["cp", "-a", "--", str(src), str(dst)], check=True)
    return dst


def status_porcelain(root: Path) -> str:
    return git_out(root, "status", "--porcelain=v1", "--untracked-files=all")


def fsck(root: Path, *extra: str) -> subprocess.CompletedProcess:
    """``git fsck --strict`` of the repository at ``root`` (a work tree or a bare one), without the commit-graph and
    multi-pack-index checks where it has neither (``acpmem.vault.gitrun.fsck_options``: 5.2 → 2.4 ms a call, and the
    suite runs it ~1,000 times)."""
    from acpmem.vault.gitrun import fsck_options

    skip = fsck_options(root / ".git" if (root / ".git").is_dir() else root)   # a work tree's, or a bare one's
    return subprocess.run(["git", "-C", str(root), *skip, "fsck", "--strict", "--no-progress", *extra],
                          capture_output=True, text=True, env=git_env(), timeout=300)


def leftovers(root: Path) -> list[str]:
    """Lock files, temp files and a pending journal anywhere in the vault (held flock files are not leftovers)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if name.endswith((".lock", ".tmp")) and rel != os.path.join(".acpmem", "locks", "repo.lock"):
                out.append(rel)
            elif name.startswith("tmp_obj_") or name in ("journal.json", "git-running", "reads.log.folding"):
                out.append(rel)
    return sorted(out)


def git_blobs(root: Path) -> bytes:
    """Every object in the repository, decompressed and delta-resolved (loose and packed)."""
    p = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"], capture_output=True,
                       env=git_env(), timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def every_stored_byte(root: Path) -> bytes:
    """All bytes under .git and .acpmem as stored, plus zlib-decompressed forms of whatever is compressed (loose
    objects whole, pack files object by object), plus the objects as git resolves them. For secret scanning."""
    chunks = [git_blobs(root)]
    for sub in (".git", ".acpmem"):
        for dirpath, _, filenames in os.walk(root / sub):
            for name in filenames:
                try:
                    data = (Path(dirpath) / name).read_bytes()
                except OSError:
                    continue
                chunks.append(data)
                chunks.extend(_inflate_all(data))
    return b"\n".join(chunks)


def _inflate_all(data: bytes) -> list[bytes]:
    """Decompress every zlib stream found in ``data`` (a loose object is one; a pack holds one per object)."""
    out = []
    pos = 0
    while True:
        i = data.find(b"x", pos)
        if i < 0 or i + 1 >= len(data):
            return out
        if (data[i] * 256 + data[i + 1]) % 31 == 0:
            d = zlib.decompressobj()
            try:
                chunk = d.decompress(data[i:], 50_000_000)
                if chunk and d.eof:
                    out.append(chunk)
                    pos = len(data) - len(d.unused_data)
                    continue
            except zlib.error:
                pass
        pos = i + 1


# --------------------------------------------------------------------------------------------- this process

def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def child_pids(pid: int | None = None) -> list[int]:
    pid = os.getpid() if pid is None else pid
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(d))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    if sys.argv[1] == "write":
        writer(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], ready=sys.argv[6:] == ["--ready"])
    elif sys.argv[1] == "edit":
        editor(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    elif sys.argv[1] == "supersede":
        superseder(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif sys.argv[1] == "read":
        reader(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")


def doc_with(marker: str) -> str:
    """The text of the one page (README.md or docs/*.md) that holds ``marker``."""
    root = Path(__file__).resolve().parents[2]
    hits = [t for t in (p.read_text("utf-8") for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
            if marker in t]
    assert len(hits) == 1, f"{marker!r} is in {len(hits)} pages of README.md and docs/, not one"
    return hits[0]


def run_readme_sh(marker: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the first ```sh block after ``marker`` in the README or the docs/ page that holds it, as written (bash,
    pipefail), with ``acp`` a real process without a fresh interpreter first on PATH (``launcher``), temporary
    files under ``cwd`` and no $ACPMEM_USER_VAULT (the conftest's HOME is a temporary one)."""
    import re

    import launcher

    readme = doc_with(marker)
    part = readme[readme.index(marker):]
    block = re.search(r"```sh\n(.*?)```", part, re.S).group(1)
    env = dict(os.environ, PATH=launcher.path_env(), TMPDIR=str(cwd))
    env.pop("ACPMEM_USER_VAULT", None)
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def warnings_said(stderr: str) -> list[str]:
    """The warnings a command printed on stderr, as ``Warning: …`` lines: a plain line, or under ``--json`` the
    object ``{"warning": {"message": …}}`` on its line."""
    import json

    said = []
    for line in stderr.splitlines():
        if line.startswith("Warning:"):
            said.append(line)
        elif line.startswith('{"warning": '):
            said.append("Warning: " + json.loads(line)["warning"]["message"])
    return said


def queued_on(sock) -> int:
    """Sockets bound to the Unix socket path ``sock`` in the kernel's table (``/proc/net/unix``): its listener, plus
    one per connection not yet accepted (a stopped server accepts none; a client that gave up leaves its connection
    queued) or accepted and not yet closed."""
    with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.rstrip("\n").endswith(" " + str(sock)))
