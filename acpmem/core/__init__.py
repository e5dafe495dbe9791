"""The pure core: values, the entry model and file format, the score, framing, rendering, the tool interface and
redaction. No I/O: text and values in, text and values out (``docs/design.md``, "Architecture")."""
