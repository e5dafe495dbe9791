"""The vault: discovery, settings, the reader and the writer, git, locks, the read log, recall and surfacing,
history, edit, sync and init. The only layer that touches the vault's files and git."""
