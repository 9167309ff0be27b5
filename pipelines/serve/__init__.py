"""Serving readers: the PostgreSQL publication."""
