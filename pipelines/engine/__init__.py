"""The engine's steps (docs/ARCHITECTURE.md): normalise, ingest, route, plan, order, apply, commit."""
