"""What `inorder` says on the terminal while it works: progress lines on stderr. In `inorder run`, the
assets' own log lines (a pass's Spark stages, committing, publishing) become progress lines through
PROGRESS_LOGGER instead of Dagster's console log, whose events and format are left out."""

from __future__ import annotations

import logging
import sys
import time

PROGRESS_LOGGER = "inorder_progress"  # its key in the code location's loggers and in a run's config


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# Dagster's own lines for a step it skips, logged as plain lines, not events: after another step failed (the command
# says the failure's cause itself, once), or when the run did not materialise what it checks (a view a tick left alone)
_SKIPPED_STEP = ("Dependencies for step ", "Skipping step ")


class _SayHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        message = meta.get("orig_message") or record.getMessage()
        # a step's context.log line; its warnings and errors (a refused view, a publication that failed) are
        # part of the run's result, which the command prints once, at its end
        if meta.get("dagster_event") is None and not message.startswith(_SKIPPED_STEP) and record.levelno < logging.WARNING:
            say(message)


def progress_logger(init_context: object) -> logging.Logger:
    """PROGRESS_LOGGER's logger function (inorder/definitions.py); this module spares the CLI Dagster's import."""
    logger = logging.Logger("inorder.progress", logging.INFO)
    logger.addHandler(_SayHandler())
    return logger
