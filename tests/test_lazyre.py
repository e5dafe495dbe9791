"""``acpmem.core.lazyre``: a pattern compiled at its first use behaves as the compiled pattern; what a per-turn read
never uses is never compiled; the read server compiles them all before it forks its readers."""
from __future__ import annotations

import re
import subprocess
import sys

from hypothesis import given, strategies as st

import fuzzing
from acpmem.core.lazyre import LazyPattern, compile_all, compile_later

SOURCES = [(r"\r\n|[\r\x0b\x0c\x85\u2028\u2029]", 0), ("acpmem", re.IGNORECASE), (r"b([0-9]{1,9})\Z", 0),
           (r"^<{7}(?: |\r?$)", re.MULTILINE), (r"(?P<word>[a-z]+)-(?P<num>[0-9]+)", 0)]


@fuzzing.hyp_settings(200)
@given(text=st.text(alphabet=st.sampled_from("ab9-\r\n<x AcPmEm\u2028"), max_size=30), which=st.integers(0, 4))
def test_a_pattern_compiled_later_answers_as_the_compiled_one(text, which):
    src, flags = SOURCES[which]
    real, lazy = re.compile(src, flags), compile_later(src, flags)
    m1, m2 = real.match(text), lazy.match(text)
    assert (m1 and (m1.span(), m1.groups())) == (m2 and (m2.span(), m2.groups()))
    assert lazy.sub("_", text) == real.sub("_", text) and lazy.subn("_", text) == real.subn("_", text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.findall(text) == real.findall(text) and lazy.split(text) == real.split(text)
    assert bool(lazy.search(text)) == bool(real.search(text))
    assert bool(lazy.fullmatch(text)) == bool(real.fullmatch(text))
    assert (lazy.pattern, lazy.flags, lazy.groups, lazy.groupindex) == \
        (real.pattern, real.flags, real.groups, real.groupindex)


def test_compiled_at_first_use_then_the_patterns_own_methods():
    p = compile_later(r"lazy-[0-9]+-only-here")
    assert "match" not in vars(p)   # nothing compiled yet
    assert p.match("lazy-12-only-here")
    assert isinstance(vars(p)["match"].__self__, re.Pattern)   # later uses go straight to the pattern
    assert p.search.__self__ is p.match.__self__
    assert "lazy-" in repr(p)
    fresh = compile_later(r"asked-[a-z]+-by-the-import-system")
    assert not hasattr(fresh, "__path__") and not hasattr(fresh, "_private")   # such questions are not uses:
    assert "match" not in vars(fresh)                                         # nothing compiled for them
    q = compile_later("(unbalanced")
    try:
        q.match("x")
    except re.error:
        pass
    else:
        raise AssertionError("a bad pattern must fail at its first use")
    assert isinstance(q, LazyPattern) and "match" not in vars(q)


def test_compile_all_compiles_every_module_pattern():
    code = ("import acpmem.core.framing, acpmem.core.entry, acpmem.search.ranking\n"
            "from acpmem.core import lazyre\n"
            "mine = [p for p in lazyre._ALL]\n"
            "assert len(mine) >= 15 and all('match' not in vars(p) for p in mine), len(mine)\n"
            "lazyre.compile_all()\n"
            "assert all('match' in vars(p) for p in mine)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_a_show_compiles_no_pattern_of_a_write_and_the_read_server_compiles_them_all(tmp_path):
    code = ("import sys, io, contextlib, json\n"
            "from acpmem.cli.main import main\n"
            "from acpmem.core import lazyre, entry, render, entryfile\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    assert main(['memory', '--vault', sys.argv[1], 'init', '--example', sys.argv[1]], 'acp') == 0\n"
            "ident = min(p.stem for p in __import__('pathlib').Path(sys.argv[1], 'entries').glob('*.md')).split('-')[0]\n"
            "with contextlib.redirect_stdout(out):\n"
            "    assert main(['memory', '--vault', sys.argv[1], 'show', ident], 'acp') == 0\n"
            "assert ident in out.getvalue()\n"
            "unused = {entry._BRANCH_BAD, entry.HASH_RE, render._OWN_FRAMED, render._OWN_LINES,\n"
            "          entryfile._CONFLICT_OPEN}\n"
            "assert all('match' not in vars(p) for p in unused)\n"
            "from acpmem.cli import readserver\n"
            "readserver.warm()\n"
            "left = [p for p in lazyre._ALL if 'match' not in vars(p)]\n"
            "assert not left, left\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "v")], capture_output=True, text=True,
                       timeout=120, env={**__import__("os").environ, "ACPMEM_USER_VAULT": "none"})
    assert p.returncode == 0, p.stderr
