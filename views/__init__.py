"""The bank demo's projections: each module defines a `VIEW`, found by pipelines/registry.py (nothing
is listed by hand). `bank_generator` writes the demo's batches."""
