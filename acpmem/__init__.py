"""acpmem — cross-session long-term memory for LLM agents.

The library owns the algorithms (entry model, selection and decay, recall, the tool interface);
the CLI, the MCP server and the hooks are thin adapters over it.
"""
__version__ = "0.1.0"
