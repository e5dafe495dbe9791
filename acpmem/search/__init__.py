"""Finding entries: text analysis, word lists, ranking, the kernel port, and the derived index (the catalog of
parsed entry files, the search tables, and the watcher that keeps them current)."""
