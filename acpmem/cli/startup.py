"""What a command's process sets before its modules load: the console scripts and ``python -m acpmem`` call
``collect_less`` first (the read server too, for the readers it forks), and a command that runs in its own process
rather than in the read server's loads pathlib through ``lighter_pathlib`` (``acpmem.cli.main``). Importing acpmem
does neither, so a program that imports it keeps its own collector and its own imports."""
import gc

# A command lives for tens of milliseconds, most of them loading modules: at the collector's default threshold
# (700 new objects) a per-turn read collects 15-20 times, 2-3 ms or 5-7% of its time, and frees nothing that
# matters before it exits. At 50,000 it does not collect at all; a long-lived process (the MCP server, the watcher,
# the read server) still collects, about seventy times less often.
FIRST_GENERATION = 50_000


def collect_less() -> None:
    """Raise the collector's first threshold to ``FIRST_GENERATION`` (never lower it); the read server's forked
    readers inherit it."""
    if gc.get_threshold()[0] < FIRST_GENERATION:
        gc.set_threshold(FIRST_GENERATION)


def lighter_pathlib() -> None:
    """Import ``pathlib`` without ``urllib.parse``. Python 3.11's and 3.12's pathlib import it at the top for one
    function (``quote_from_bytes``, which only ``Path.as_uri`` calls), and it brings ``ipaddress``: together about
    3 ms of CPU, a third of a Python start-up, on every command (Python 3.13 imports it where ``as_uri`` needs it).
    While pathlib loads, ``urllib.parse`` is a stand-in whose ``quote_from_bytes`` imports the real module when first
    called; any other name asked of it (another Python's pathlib) loads the real one at once. The stand-in is gone
    from ``sys.modules`` when pathlib is loaded, so whatever imports ``urllib.parse`` later gets the real module.
    Nothing is done where either module is already loaded."""
    import sys

    if "pathlib" in sys.modules or "urllib.parse" in sys.modules:
        return
    stand_in = type(sys)("urllib.parse")
    stand_in.quote_from_bytes = _quote_from_bytes
    stand_in.__getattr__ = _real_name   # PEP 562: a name the stand-in lacks
    sys.modules["urllib.parse"] = stand_in
    try:
        import pathlib  # noqa: F401
    finally:
        if sys.modules.get("urllib.parse") is stand_in:
            del sys.modules["urllib.parse"]


def _real():
    import sys

    if getattr(sys.modules.get("urllib.parse"), "__getattr__", None) is _real_name:
        del sys.modules["urllib.parse"]   # the stand-in, still in place: the real module replaces it
    import urllib.parse

    return urllib.parse


def _quote_from_bytes(bs, safe="/"):
    return _real().quote_from_bytes(bs, safe)


def _real_name(name: str):
    if name.startswith("__"):   # what the import system looks up (``__path__``: a package?) is not pathlib's asking
        raise AttributeError(name)
    return getattr(_real(), name)
