"""What a pass counts: the engine's contract with the ledger, the checks and the terminal. The walk runs on
Spark's executors, so this module imports nothing (least of all the store or DuckDB)."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What a pass counts per (view, entry), each value the ledger column (`inorder.batches`) it is summed in:
    the messages `selected`, what each one came to (`OUTCOME_COLUMNS`; a selected message with none of them
    is still pending), and the gap ranges skipped. Their order is the ledger's."""

    SELECTED = "selected"
    APPLIED = "applied"
    IGNORED = "ignored"
    HANDLER_ERROR = "handler_error"
    DUPLICATE = "duplicate"
    LATE = "late"
    CONFLICT = "conflict"
    GAPS_SKIPPED = "gaps_skipped"


# every count of a pass, by name, in the ledger's order; and the outcomes a selected message ends in
COUNTED = tuple(o.value for o in Outcome)
OUTCOME_COLUMNS = tuple(o.value for o in Outcome if o not in (Outcome.SELECTED, Outcome.GAPS_SKIPPED))
