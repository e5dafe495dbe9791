"""The names of a vault's files and folders, and of the local state acpmem keeps beside them.

```
.acp-memory/            VAULT_DIRNAME: found by walking up from the current folder
  acpmem.toml           SETTINGS_FILE
  MEMORY.md             MEMORY_FILE, generated
  entries/              ENTRIES_DIR: one markdown file per entry
  reads/                READS_DIR: last-read times, one file per clone
  proposals/            PROPOSALS_DIR: entries waiting for a person (``[write] policy = "review"``)
  reviews/              REVIEWS_DIR: each clone's review decisions and marker, one file per clone
  .acpmem/              STATE_DIRNAME: derived local state, never committed; may be deleted at any time
    index.sqlite        DB_NAME: the catalog and the search index
    watch.sock          WATCH_SOCK: a large vault's watcher answers here
    locks/ sessions/
  .git/acpmem/          GIT_STATE_DIRNAME: local state that is not derived, kept when .acpmem/ is deleted
    pending/            PENDING_DIR: the acknowledged requests waiting for the worker
    worker.flock        the worker's lock
```

Every module names these through here, so the layout is written down once (``docs/design.md`` describes it).
"""
from __future__ import annotations

from pathlib import Path

VAULT_DIRNAME = ".acp-memory"
STATE_DIRNAME = ".acpmem"
SETTINGS_FILE = "acpmem.toml"
MEMORY_FILE = "MEMORY.md"
ENTRIES_DIR = "entries"
READS_DIR = "reads"
PROPOSALS_DIR = "proposals"
REVIEWS_DIR = "reviews"
ENV_VAULT = "ACPMEM_VAULT"
ENV_USER_VAULT = "ACPMEM_USER_VAULT"   # the user vault: a path, or "none"
USER_VAULT_DEFAULT = "~/" + VAULT_DIRNAME
USER_ID_PREFIX = "u-"                  # every id acpmem gives a user-layer entry starts with it
LAYER_PROJECT = "project"
LAYER_USER = "user"

# under STATE_DIRNAME
DB_NAME = "index.sqlite"
WATCH_SOCK = "watch.sock"   # the watcher's (acpmem.search.watch): where it exists, one may answer
LOCKS_DIR = "locks"
PENDING_DIR = "pending"   # under GIT_STATE_DIRNAME (an older acpmem kept it under STATE_DIRNAME)
GIT_STATE_DIRNAME = "acpmem"   # in the vault's git folder
SESSIONS_DIR = "sessions"

PACKAGE_DIR = Path(__file__).parent.parent
DATA_DIR = PACKAGE_DIR / "data"
TEMPLATE_DIR = PACKAGE_DIR / "vault_template"
