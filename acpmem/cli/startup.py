"""What a command's process sets before its modules load: the console scripts, ``python -m acpmem`` and the read
server call ``collect_less`` first; importing acpmem never does, so a program that imports it keeps its own
collector settings."""
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
