"""Operating-system plumbing shared by every layer above the core: atomic files, flock locks, detached helper
processes, process checks and the derived SQLite database. No knowledge of entries or vaults."""
