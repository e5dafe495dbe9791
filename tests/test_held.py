"""The listings the read server holds (``acpmem.search.held``): a held listing is what the long way gives, it is used
by ``load`` and ``show``'s lookup by id, and every kind of change to the vault lets it go before the next read.
Real inotify, real files, real SQLite, real git (the vault fixture); the server's own loop is proved in
test_read_server.py with real processes."""
from __future__ import annotations

import os
import shutil

import pytest

from helpers_proc import make_entry
from acpmem.infra import inotify
from acpmem.search import catalog, held
from acpmem.vault.reader import VaultReader

pytestmark = pytest.mark.skipif(not hasattr(os, "pipe") or not os.path.isdir("/proc/self"), reason="Linux only")


@pytest.fixture(autouse=True)
def _settled_at_once(monkeypatch):
    """Files written by a test are not racily clean (``catalog.RACY_NS``): a catalog with such rows is not held
    (``test_a_vault_written_a_moment_ago_is_held_once_it_settles``), and these tests hold what they just wrote."""
    monkeypatch.setattr(catalog, "RACY_NS", 0)


@pytest.fixture
def holder():
    h = held.Holder()
    yield h
    h.close()
    held.REPORT_FD.clear()


def _listing(root, *, light=True):
    """What the long way gives: a reader of the vault's own, outside any held listing."""
    saved = dict(held.HELD)
    held.HELD.clear()
    try:
        with VaultReader(root) as r:
            loaded = r.load(light=light, with_reads=False)
            return [e.to_json() for e in loaded.entries], [p.to_json() for p in loaded.problems]
    finally:
        held.HELD.update(saved)


def _hold(h, root, kind=held.LIGHT):
    with VaultReader(root) as r:
        types = tuple(r.settings.types)
        assert h.hold(str(root), str(r.db_path), types, kind)
    return held.HELD[(str(root), kind)]


def _write(vault, *entries):
    vault.write_entries([e.with_changes(path=vault.path_for(e.id, e.title)) for e in entries], subject="test",
                        why="test")


def test_a_held_listing_is_what_the_long_way_gives_and_load_takes_it(vault, holder):
    _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"),
           make_entry("aab222", "Retries back off", "- 30 s"))
    root = vault.root
    (root / "entries" / "broken.md").write_text("no frontmatter here\n")
    h = _hold(holder, root)
    with VaultReader(root) as r:
        loaded = r.load(light=True, with_reads=False)
        assert all(a is b for a, b in zip(loaded.entries, h.snapshot.entries, strict=True))   # taken, not built
    assert ([e.to_json() for e in loaded.entries], [p.to_json() for p in loaded.problems]) == _listing(root)
    holder.drain()
    assert (str(root), held.LIGHT) in held.HELD                    # nothing changed: still held


@pytest.mark.parametrize("change", ["same size and mtime", "added", "removed", "renamed", "entries replaced",
                                    "a file of another program"])
def test_every_change_lets_the_listing_go_before_the_next_read(vault, holder, change):
    e = make_entry("aaa111", "Deploys go through staging", "- staging first")
    _write(vault, e, make_entry("bbb222", "Retries back off", "- 30 s"))
    root = vault.root
    path = root / vault.path_for(e.id, e.title)
    _hold(holder, root)
    if change == "same size and mtime":   # only the ctime shows it
        st = path.stat()
        path.write_text(path.read_text().replace("Deploys go through staging", "Deploys go through STAGING"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_size == st.st_size
    elif change == "added":
        _write(vault, make_entry("ccc333", "Logs are kept a week", "- 7 days"))
    elif change == "removed":
        path.unlink()
    elif change == "renamed":
        path.rename(path.with_name("moved.md"))
    elif change == "entries replaced":
        shutil.copytree(root / "entries", root / "entries.new")
        (root / "entries.new" / path.name).unlink()
        os.rename(root / "entries", root / "entries.old")
        os.rename(root / "entries.new", root / "entries")
    else:
        (root / "entries" / "notes.txt").write_text("an editor's file\n")
    holder.drain()
    assert (str(root), held.LIGHT) not in held.HELD
    with VaultReader(root) as r:   # the long way again, and what it gives is the files as they are now
        got = r.load(light=True, with_reads=False)
    assert ([x.to_json() for x in got.entries], [p.to_json() for p in got.problems]) == _listing(root)
    titles = {x.title for x in got.entries}
    if change == "same size and mtime":
        assert "Deploys go through STAGING" in titles
    elif change == "added":
        assert "Logs are kept a week" in titles
    elif change in ("removed", "entries replaced"):
        assert "Deploys go through staging" not in titles


def test_another_type_list_is_not_served_from_a_held_listing(vault, holder):
    _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"))
    _hold(holder, vault.root)
    assert held.get(str(vault.root), ("fact",), True) is None
    assert held.get(str(vault.root), ("fact", "decision", "lesson", "reference"), False) is None   # not the light one


def test_show_by_id_from_a_held_listing_is_what_the_index_gives(vault, holder):
    _write(vault, make_entry("aaa111", "One", "- one"), make_entry("aab222", "Two", "- two"),
           make_entry("bbb333", "Three", "- three"), make_entry("ccc444", "Four", "- four", typ="decision"))
    root = vault.root
    (root / "entries" / "aax-broken.md").write_text("---\nid: [\n---\n")
    bad_type = (root / vault.path_for("ccc444", "Four")).read_text().replace("type: decision", "type: gossip")
    (root / "entries" / "ccc999-copy.md").write_text(bad_type.replace("ccc444", "ccc999"))
    dup = (root / vault.path_for("bbb333", "Three")).read_text()
    (root / "entries" / "zz-dup.md").write_text(dup)
    h = _hold(holder, root)
    assert len(h.snapshot.problems) == 3
    for prefix in ("", "a", "aa", "aaa111", "aax", "b", "bbb333", "c", "ccc9", "zz", "nope", "\udc80"):
        got = held.by_id(str(root), h.types, prefix)
        with VaultReader(root) as r:
            want = r.with_db(lambda con: catalog.by_id(con, root, h.types, prefix))
        assert [e.to_json() for e in got.entries] == [e.to_json() for e in want.entries], prefix
        assert [p.to_json() for p in got.problems] == [p.to_json() for p in want.problems], prefix



def test_finding_ids_in_a_held_listing_keeps_the_listings_order_whatever_the_file_names(vault, holder):
    """``by_id`` finds a prefix among the held ids by bisection (it looks at the matching entries only): where the
    file names do not sort as the ids (entries a person named), the entries come in the listing's order, as the
    index gives them, for every prefix of every id and prefixes between and beyond them."""
    import random

    rng = random.Random(7)
    ids = sorted({"".join(rng.choice("ab01") for _ in range(rng.randint(3, 6))) for _ in range(60)})
    names = [f"{rng.choice('mnopq')}{i:02d}-{ident}.md" for i, ident in enumerate(rng.sample(ids, len(ids)))]
    entry = (vault.root / vault.path_for("zzz000", "Template")).parent
    for name in names:
        ident = name.split("-", 1)[1][:-3]
        (entry / name).write_text(f"---\nid: {ident}\ntitle: Entry {ident}\ntype: fact\nimportance: 5\n"
                                  f"created: 2026-11-29T12:00:00Z\n---\n- about {ident}\n", "utf-8")
    h = _hold(holder, vault.root)
    assert [e.id for e in h.snapshot.entries] != ids          # the listing's order is not the ids' order
    prefixes = {i[:n] for i in ids for n in range(len(i) + 1)} | {"a2", "b~", "1", "c", "ab01ab0", "0\udc80"}
    with VaultReader(vault.root) as r:
        for prefix in sorted(prefixes):
            got = held.by_id(str(vault.root), h.types, prefix)
            want = r.with_db(lambda con: catalog.by_id(con, vault.root, h.types, prefix))
            assert [e.id for e in got.entries] == [e.id for e in want.entries], prefix
            assert [e.to_json() for e in got.entries] == [e.to_json() for e in want.entries], prefix

def test_a_read_the_long_way_is_reported_and_the_report_is_held(vault, holder):
    _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"))
    r_fd, w_fd = os.pipe()
    os.set_blocking(r_fd, False)
    held.REPORT_FD[:] = [w_fd]
    try:
        with VaultReader(vault.root) as r:
            r.load(light=True)
            r.resolve("aaa")
        holder.read_reports(r_fd)
        assert set(holder.wanted) == {(str(vault.root), held.LIGHT)}
        holder.hold_wanted()
        assert (str(vault.root), held.LIGHT) in held.HELD and not holder.wanted
        with VaultReader(vault.root) as r:   # and now show's lookup takes it
            assert r.resolve("aaa").title == "Deploys go through staging"
        holder.read_reports(r_fd)
        assert not holder.wanted            # a held listing is not reported again
        held.loaded("/v\x1fx", "/v/db", ("fact",), held.LIGHT)          # the report's separators: never said
        held.loaded("/v", "/v/db", ("fa\nct",), held.LIGHT)
        held.loaded("/v" + "x" * held.MAX_REPORT, "/v/db", ("fact",), held.LIGHT)   # nor what is too long
        holder.read_reports(r_fd)
        assert not holder.wanted
    finally:
        os.close(r_fd)
        os.close(w_fd)


def test_a_vault_too_large_or_without_entries_is_not_held(vault, holder, monkeypatch):
    _write(vault, make_entry("aaa111", "One", "- one"), make_entry("bbb222", "Two", "- two"))
    monkeypatch.setattr(held, "MAX_ENTRIES", 1)
    with VaultReader(vault.root) as r:
        assert not holder.hold(str(vault.root), str(r.db_path), tuple(r.settings.types), held.LIGHT)
    assert not held.HELD and not holder.roots            # and its watches are gone with it
    assert str(vault.root) in holder.refused             # (not counted again while the server lives)
    monkeypatch.setattr(held, "MAX_ENTRIES", 20_000)
    with VaultReader(vault.root) as r:
        assert not holder.hold(str(vault.root), str(r.db_path), tuple(r.settings.types), held.ROWS)
    holder.refused.clear()
    shutil.rmtree(vault.root / "entries")
    with VaultReader(vault.root) as r:
        assert not holder.hold(str(vault.root), str(r.db_path), tuple(r.settings.types), held.LIGHT)
    assert not held.HELD and not holder.roots


def test_the_oldest_listing_is_let_go_past_the_limit(tmp_path, holder, monkeypatch, clock):
    from acpmem.vault.create import init_vault

    monkeypatch.setattr(held, "MAX_VAULTS", 2)
    roots = []
    for i in range(3):
        v = init_vault(tmp_path / f"v{i}", clock=clock)
        _write(v, make_entry(f"aaa11{i}", f"Entry {i}", "- x"))
        v.close()
        roots.append(v.root)
        _hold(holder, v.root)
    assert [k[0] for k in held.HELD] == [str(roots[1]), str(roots[2])]
    _hold(holder, roots[2], held.ROWS)                  # another kind of a vault held: no other vault let go
    assert [k[0] for k in held.HELD] == [str(roots[1]), str(roots[2]), str(roots[2])]


def test_surface_scores_the_held_index_rows_as_it_scores_the_index(vault, holder, clock):
    from acpmem.read.retrieval import surface
    from acpmem.search import query

    _write(vault, *(make_entry(f"e{i}aaaa", f"Rule number {i} of the deploys", f"- rule {i}", importance=i % 9 + 1)
                    for i in range(12)))
    root = vault.root
    h = _hold(holder, root, held.ROWS)
    with VaultReader(root) as r:
        assert h.rows == query.light_entries(r.with_db(lambda con: query.light_rows(con, types=h.types)))

    def surfaced(session):
        with VaultReader(root, clock=clock) as r:
            return [(s.entry.id, s.text) for s in surface(r, session, seed=3).entries]

    a = surfaced("s-held")
    saved = dict(held.HELD)
    held.HELD.clear()
    assert surfaced("s-long") == a and len(a) >= 2
    held.HELD.update(saved)
    h.rows = [(p, e) for p, e in h.rows if e.id != a[0][0]]   # surface reads what is held: the first one is gone
    assert a[0][0] not in [i for i, _ in surfaced("s-held-2")]


def test_a_held_vault_read_through_another_database_is_brought_up_to_date_there(vault, holder, tmp_path):
    """A vault held from its own database, then read with its state kept elsewhere (it became read-only: a remount
    is no change the kernel reports, so nothing is let go): the other database's catalog is refreshed, never taken
    as current because the vault is held — else a served recall found nothing there."""
    from acpmem.search import watch
    from test_store import top

    _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"))
    root = vault.root
    _hold(holder, root)
    own = vault.state_dir / catalog.DB_NAME
    con, res = watch.open_fresh(vault.state_dir, root)
    assert res.via == "held" and top(con, "staging")                       # its own database: held, and current
    con.close()
    elsewhere = tmp_path / "state-elsewhere"
    elsewhere.mkdir()
    assert held.current(str(root), str(own)) and not held.current(str(root), str(elsewhere / catalog.DB_NAME))
    con, res = watch.open_fresh(elsewhere, root)
    try:
        assert res.via == "scan" and top(con, "staging")
    finally:
        con.close()


def test_a_vault_on_a_network_file_system_is_never_held(vault, holder, monkeypatch):
    mountinfo = ("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                 "40 27 0:50 / /mnt/team\\040share rw,relatime - nfs4 srv:/export rw\n"
                 "41 27 0:51 / /mnt/team rw,relatime - tmpfs tmpfs rw\n"
                 "42 27 0:52 / /mnt/fuse rw - fuse.sshfs host:/x rw\n")
    assert inotify.filesystem_of("/mnt/team share/vault", mountinfo) == "nfs4"
    assert inotify.filesystem_of("/mnt/team/vault", mountinfo) == "tmpfs"
    assert inotify.filesystem_of("/mnt/teamx/vault", mountinfo) == "ext4"
    assert inotify.filesystem_of("/mnt/fuse/v", mountinfo) not in inotify.LOCAL_FILESYSTEMS
    _write(vault, make_entry("aaa111", "One", "- one"))
    assert inotify.filesystem_of(str(vault.root)) in inotify.LOCAL_FILESYSTEMS   # this machine's temporary folder
    monkeypatch.setattr(inotify, "filesystem_of", lambda path, mountinfo=None: "nfs4")
    with VaultReader(vault.root) as r:
        assert not holder.hold(str(vault.root), str(r.db_path), tuple(r.settings.types), held.LIGHT)
    assert not held.HELD and not holder.roots


def test_a_held_vaults_index_is_used_without_a_scan_until_it_changes(vault, holder):
    from acpmem.search import query, watch

    _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"))
    root = vault.root

    def fresh_and_find(word):
        with VaultReader(root) as r:
            def work(con):
                done = watch.fresh(con, root, r.state_dir, r.settings)
                return done.via, [h.id for h in query.search(con, word, 5)]
            return r.with_db(work)

    assert fresh_and_find("staging")[0] == "scan"
    _hold(holder, root, held.ROWS)
    db_path = str(vault.state_dir / catalog.DB_NAME)
    assert held.current(str(root), db_path)
    via, found = fresh_and_find("staging")
    assert via == "held" and len(found) == 1
    _write(vault, make_entry("bbb222", "Rollbacks go through staging too", "- staging again"))
    holder.drain()
    assert not held.current(str(root), db_path)
    via, found = fresh_and_find("rollbacks")
    assert via == "scan" and found[0].startswith("entries/bbb222")


def test_what_is_held_in_all_stays_within_its_bound(tmp_path, holder, monkeypatch, clock):
    from acpmem.vault.create import init_vault

    roots = []
    for i in range(2):
        v = init_vault(tmp_path / f"v{i}", clock=clock)
        _write(v, *(make_entry(f"e{i}{j}aaaa", f"Entry {i} {j}", "- x") for j in range(3)))
        v.close()
        roots.append(str(v.root))
    monkeypatch.setattr(held, "MAX_HELD", 7)
    _hold(holder, roots[0], held.LIGHT)
    _hold(holder, roots[0], held.ROWS)            # 6 held
    _hold(holder, roots[1], held.LIGHT)           # 9 > 7: the other vault is let go, and its watches
    assert list(held.HELD) == [(roots[1], held.LIGHT)]
    assert all(roots[0] not in rs for rs in holder.roots.values())
    monkeypatch.setattr(held, "MAX_HELD", 2)      # a vault alone over the bound is not held
    with VaultReader(roots[0]) as r:
        assert not holder.hold(roots[0], str(r.db_path), tuple(r.settings.types), held.LIGHT)
    assert list(held.HELD) == [(roots[1], held.LIGHT)] and all(roots[0] not in rs for rs in holder.roots.values())


def test_a_vault_written_a_moment_ago_is_held_once_it_settles(vault, holder, monkeypatch):
    monkeypatch.setattr(catalog, "RACY_NS", 3_600 * 10**9)   # everything written within the hour is "a moment ago"
    _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"))
    with VaultReader(vault.root) as r:
        args = (str(vault.root), str(r.db_path), tuple(r.settings.types))
        assert not holder.hold(*args, held.LIGHT) and not holder.hold(*args, held.ROWS)
        assert r.with_db(catalog.racily_clean)
    assert not held.HELD and not holder.roots and str(vault.root) not in holder.refused   # (asked again later)
    monkeypatch.setattr(catalog, "RACY_NS", 0)               # settled
    assert holder.hold(*args, held.LIGHT)


def _served(root, state_dir, state, only=None):
    """``served_reads`` in a read server's child that holds ``state`` for ``root``: (the times, whether it asked
    the server to take them again)."""
    from acpmem.vault import readlog

    r_fd, w_fd = os.pipe()
    os.set_blocking(r_fd, False)
    held.READS[str(root)], held.REPORT_FD[:] = state, [w_fd]
    try:
        got = readlog.served_reads(root, state_dir, state_dir / catalog.DB_NAME, only)
        os.close(w_fd)
        return got, os.read(r_fd, 4096) != b""
    finally:
        held.READS.pop(str(root), None)
        held.REPORT_FD.clear()
        os.close(r_fd)


def _times_both(root, state_dir, state, only=None):
    from acpmem.vault import readlog

    return readlog.last_reads(root, state_dir, only), _served(root, state_dir, state, only)[0]


@pytest.mark.parametrize("change", ["nothing", "appended", "a line half-written", "folded and read again",
                                    "a teammate's file", "a teammate's file rewritten", "a file removed",
                                    "the log replaced by a shorter one", "the log rewritten, same length",
                                    "the log made a symlink", "a FIFO among the files"])
def test_held_read_times_are_what_the_files_say_after_every_kind_of_change(vault, change):
    """The server holds what the reads files gave (the committed ``reads/*.tsv``, the local log's whole lines); a
    reader takes it only while those bytes are unchanged and parses what was appended since: after each kind of
    change the times are exactly what reading every file gives."""
    from acpmem.vault import readlog

    reads = vault.root / "reads"
    reads.mkdir(exist_ok=True)
    (reads / "aaaa.tsv").write_text("e1\t2026-11-01T10:00:00Z\ne2\t2026-11-02T10:00:00Z\n")
    (reads / "bbbb.tsv").write_text("e1\t2026-11-03T10:00:00Z\ne3\t2026-11-01T10:00:00Z\n")
    readlog.record(vault.state_dir, ["e2", "e4"], "2026-11-05T10:00:00Z")
    log = vault.state_dir / readlog.LOCAL_LOG
    state = readlog.reads_state(vault.root, vault.state_dir)
    assert state is not None and state.times == readlog.last_reads(vault.root, vault.state_dir)
    if change == "appended":
        readlog.record(vault.state_dir, ["e1", "e5"], "2026-11-06T10:00:00Z")
    elif change == "a line half-written":
        with open(log, "ab") as f:
            f.write(b"e3\t2026-11-0")      # an append on its way
        state = readlog.reads_state(vault.root, vault.state_dir)   # held meanwhile: only whole lines are held
        with open(log, "ab") as f:
            f.write(b"7T10:00:00Z\ne6\t2026-11-08T10:00:00Z\n")
    elif change == "folded and read again":
        log.unlink()
        readlog.record(vault.state_dir, ["e7"], "2026-11-09T10:00:00Z")   # a new log, maybe the old inode
    elif change == "a teammate's file":
        (reads / "cccc.tsv").write_text("e8\t2026-11-10T10:00:00Z\n")
    elif change == "a teammate's file rewritten":
        st = (reads / "bbbb.tsv").stat()
        (reads / "bbbb.tsv").write_text("e1\t2026-11-04T10:00:00Z\ne3\t2026-11-01T10:00:00Z\n")   # same size
        os.utime(reads / "bbbb.tsv", ns=(st.st_atime_ns, st.st_mtime_ns))                      # same mtime
    elif change == "a file removed":
        (reads / "aaaa.tsv").unlink()
    elif change == "the log replaced by a shorter one":
        log.write_text("e9\t2026-11-11T10:00:00Z\n")
    elif change == "the log rewritten, same length":
        log.write_bytes(log.read_bytes().replace(b"e4", b"e5"))
    elif change == "the log made a symlink":
        (vault.state_dir / "elsewhere.log").write_bytes(log.read_bytes() + b"e1\t2026-11-12T10:00:00Z\n")
        log.unlink()
        log.symlink_to(vault.state_dir / "elsewhere.log")
    elif change == "a FIFO among the files":
        os.mkfifo(reads / "dddd.tsv")
    whole, taken = _times_both(vault.root, vault.state_dir, state)
    assert taken == whole
    assert _times_both(vault.root, vault.state_dir, state, frozenset({"e1", "e5"}))[1] == \
        {k: v for k, v in whole.items() if k in {"e1", "e5"}}
    if change == "nothing":   # and it was taken, not read again: a state that disagrees with the files would show
        forged = readlog.ReadsState(state.files, state.log, {**state.times, "e1": "2030-01-01T00:00:00Z"})
        assert _served(vault.root, vault.state_dir, forged) == ({**whole, "e1": "2030-01-01T00:00:00Z"}, False)
    elif change not in ("appended", "a line half-written"):   # not as they were: the server is asked to take them
        assert _served(vault.root, vault.state_dir, state)[1], change


def test_a_held_vaults_read_times_come_from_the_server_until_they_change(vault, holder):
    """The server holds a vault's read times with its listing (``Holder(reads_of=...)``); a listing in a child
    takes them, with what was appended to the log since, and lets them go with the vault."""
    from acpmem.vault import readlog

    h = held.Holder(reads_of=readlog.reads_state)
    try:
        _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"),
               make_entry("bbb222", "Rollbacks go through staging", "- staging again"))
        readlog.record(vault.state_dir, ["aaa111"], "2026-11-30T10:00:00Z")
        _hold(h, vault.root, held.LIGHT)
        assert held.reads(str(vault.root)) is not None
        readlog.record(vault.state_dir, ["bbb222"], "2026-12-01T10:00:00Z")
        with VaultReader(vault.root) as r:
            got = {e.id: e.last_read for e in r.load(light=True).entries}
        assert got == {"aaa111": "2026-11-30T10:00:00Z", "bbb222": "2026-12-01T10:00:00Z"}
        saved = dict(held.HELD), dict(held.READS)
        held.HELD.clear()
        held.READS.clear()
        try:   # the long way
            with VaultReader(vault.root) as r:
                alone = [e.to_json() for e in r.load(light=True).entries]
        finally:
            held.HELD.update(saved[0])
            held.READS.update(saved[1])
        with VaultReader(vault.root) as r:
            assert [e.to_json() for e in r.load(light=True).entries] == alone
        _write(vault, make_entry("ccc333", "Canaries first", "- canary"))
        h.drain()
        assert held.reads(str(vault.root)) is None
    finally:
        h.close()


def test_read_times_past_the_bound_are_not_held(vault, monkeypatch):
    from acpmem.vault import readlog

    readlog.record(vault.state_dir, ["e1", "e2"], "2026-11-05T10:00:00Z")
    assert readlog.reads_state(vault.root, vault.state_dir) is not None
    monkeypatch.setattr(readlog, "MAX_STATE_BYTES", 20)
    assert readlog.reads_state(vault.root, vault.state_dir) is None


def test_read_times_that_grew_are_taken_again_at_a_reads_report(vault, monkeypatch):
    """A long read-only stretch grows the local log past what the server took: a child that finds it grown past
    ``REFRESH_BYTES`` says so, and the server takes the read times again when idle; the times stay the files'."""
    from acpmem.vault import readlog

    monkeypatch.setattr(readlog, "REFRESH_BYTES", 100)
    h = held.Holder(reads_of=readlog.reads_state)
    r_fd, w_fd = os.pipe()
    os.set_blocking(r_fd, False)
    held.REPORT_FD[:] = [w_fd]
    try:
        _write(vault, make_entry("aaa111", "Deploys go through staging", "- staging first"))
        readlog.record(vault.state_dir, ["aaa111"], "2026-11-30T10:00:00Z")
        _hold(h, vault.root, held.LIGHT)
        first = held.reads(str(vault.root))
        db = vault.state_dir / catalog.DB_NAME
        readlog.record(vault.state_dir, ["bbb222"], "2026-12-01T10:00:00Z")   # grown a little: nothing said
        assert readlog.served_reads(vault.root, vault.state_dir, db) == readlog.last_reads(vault.root, vault.state_dir)
        h.read_reports(r_fd)
        assert not h.grown
        for day in range(2, 12):   # grown past the bound
            readlog.record(vault.state_dir, ["aaa111", "bbb222"], f"2026-12-{day:02d}T10:00:00Z")
        got = readlog.served_reads(vault.root, vault.state_dir, db)
        assert got == readlog.last_reads(vault.root, vault.state_dir) and got["aaa111"] == "2026-12-11T10:00:00Z"
        h.read_reports(r_fd)
        assert h.grown == {str(vault.root): str(db)}
        h.hold_wanted()
        again = held.reads(str(vault.root))
        assert again is not first and again.log == (vault.state_dir / readlog.LOCAL_LOG).read_bytes()
        assert readlog.served_reads(vault.root, vault.state_dir, db) == readlog.last_reads(vault.root, vault.state_dir)
        h.read_reports(r_fd)
        assert not h.grown   # taken again: not grown any more
    finally:
        h.close()
        held.REPORT_FD.clear()
        os.close(r_fd)
        os.close(w_fd)
