"""Ids: the shape every id must have, and random ids people can read and type.

Entry ids and request ids are drawn from an alphabet without look-alikes (no l, o, 0, 1), so a person can copy one
from a terminal or a commit message by hand.
"""
from __future__ import annotations

from acpmem.core.lazyre import compile_later

ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
ID_RE = compile_later(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")   # \Z: "$" would also match before a final newline


def random_id(rng, length: int) -> str:
    """``length`` characters of ``ALPHABET`` drawn with ``rng`` (a ``random.Random``)."""
    return "".join(rng.choice(ALPHABET) for _ in range(length))
