"""The bank demo's projections: each module defines a `VIEW`, found by pipelines/registry.py (nothing
is listed by hand). `demos.bank` writes the demo's batches; `design` is what they do by design."""
