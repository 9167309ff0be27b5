"""The read store: the home's files, the DuckDB database, its layout, view versions, rebuilds."""
