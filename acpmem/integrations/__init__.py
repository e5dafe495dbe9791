"""Adapters for agent hosts: the MCP server and the Claude Code hooks."""
