"""The ``acp memory`` command line: typer commands over the library, and a fast path for the per-turn commands
derived from the same definitions (``acpmem.cli.fast``). Kept free of imports: the per-turn commands import only
what they use."""
