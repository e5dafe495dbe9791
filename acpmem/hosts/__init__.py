"""One ``Transcript`` from any host's session: plain transcripts, DSH, pi, Claude Code."""
