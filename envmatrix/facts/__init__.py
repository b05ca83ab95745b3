"""What envmatrix knows, each fact with its source: catalog, families, package constraints, flash-attn sources."""
