"""The read path: recall, the resident index, surfacing, the layers, embeddings, rerank, sources and citation checks."""
