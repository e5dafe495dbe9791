"""The write path: commit requests, submitting them, the background worker, the fork (the model call, transcripts,
the offline extractor) and the cost ledger."""
