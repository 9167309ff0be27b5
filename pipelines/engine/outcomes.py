"""What a pass walks and counts: the engine's contract with the ledger, the checks and the terminal. The walk runs on
Spark's executors, so this module imports nothing (least of all the store or DuckDB)."""

from __future__ import annotations

from enum import StrEnum


class EntryKind(StrEnum):
    """What an entry of the store's log is (`inorder.batches`' `kind`): a batch of messages, a tick of logical
    time, or an operator's retry or skip of a view's parked streams."""

    BATCH = "batch"
    TICK = "tick"
    RETRY = "retry"
    SKIP = "skip"


OPERATOR_KINDS = (EntryKind.RETRY, EntryKind.SKIP)  # the entries an operator records (`inorder retry`, `skip`)


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
