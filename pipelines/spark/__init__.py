"""Spark: the session and the warm server."""
