"""Regular expressions compiled when first used.

A module-level ``re.compile`` runs when the module is imported, whether or not the process ever uses the pattern:
at 50–270 µs a pattern, a per-turn read compiled about a millisecond of patterns it never used (the checks of a
write, a conflict marker, a date in a query). ``compile_later`` returns a stand-in that compiles on its first use
and then holds the compiled pattern's own methods, so every later use costs what it costs on the pattern itself.
A process that forks readers compiles them all first (``compile_all``), so that no reader compiles one again.
"""
from __future__ import annotations

import re

# what a use may ask of a pattern: set on the stand-in at its first use
_FORWARDED = ("match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer", "scanner", "pattern",
              "flags", "groups", "groupindex")
_ALL: list[LazyPattern] = []


class LazyPattern:
    """``re.compile(pattern, flags)``, done at the first use."""

    def __init__(self, pattern: str | bytes, flags: int = 0):
        self._source = (pattern, flags)
        _ALL.append(self)

    def compiled(self) -> re.Pattern:
        """The compiled pattern (compiled now if it was not), its methods set on this stand-in."""
        p = re.compile(*self._source)   # re keeps what it compiled: a second call is a lookup
        for name in _FORWARDED:
            setattr(self, name, getattr(p, name))
        return p

    def __getattr__(self, name: str):   # asked only for a name not set yet: before the first use
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"compile_later({self._source[0]!r})"


def compile_later(pattern: str | bytes, flags: int = 0) -> LazyPattern:
    """What ``re.compile(pattern, flags)`` gives, compiled at its first use."""
    return LazyPattern(pattern, flags)


def compile_all() -> None:
    """Compile every stand-in made so far that is not compiled yet."""
    for p in _ALL:
        if "match" not in p.__dict__:
            p.compiled()
