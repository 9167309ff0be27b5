"""Two rules of the engine in plain Python, beside the SQL that applies them to the store, so the
in-memory engine of the project's tests (tests/memory_engine.py) follows the same rule rather than a
copy of it (tests/fast/test_engine_rules.py holds the SQL and the Python forms equal):

- which buffered streams a pass walks with no new message (`buffer_is_due`; the pass's SQL is
  `DUE_BUFFERS`, pipelines/engine/inputs.py);
- the ledger's running `pending` after each entry (`running_pending`; the commit writes it in
  `inorder.batches`, pipelines/engine/commit.py).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

from pipelines.engine.outcomes import OUTCOME_COLUMNS


def buffer_is_due(pending_count: int, parked: bool, blocked_since: int | None, gap_timeout_us: int,
                  max_pending: int, t_us: int) -> bool:
    """A buffered stream a pass at logical time `t_us` walks with no new message: it holds messages, is
    not parked, and is not blocked, or its gap timer is due, or its buffer is over `max_pending` (the
    others would walk to the state they have)."""
    return pending_count > 0 and not parked and (
        blocked_since is None or blocked_since + gap_timeout_us <= t_us or pending_count > max_pending)


def running_pending(before: int, entry_counts: Iterable[Mapping[str, int]]) -> Iterator[int]:
    """A view's buffered messages after each of a pass's entries, in order: what was buffered before the
    pass, plus each entry's selected messages, less those that left with an outcome."""
    pending = before
    for counts in entry_counts:
        pending += counts["selected"] - sum(counts[name] for name in OUTCOME_COLUMNS)
        yield pending
