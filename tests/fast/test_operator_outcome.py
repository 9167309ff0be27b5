"""What `inorder retry` and `skip` say of each stream (issue 33, finding 9): the retried message applied and
how far the stream moved, parked anew on a later message, or the retried message failed again; read from
the watermark the action found (`prev_last_seq`) and the one it left. The CLI path is in
tests/cli/test_warm_server.py (a retry that applies and parks anew) and tests/dagster/test_cli_dagster.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipelines.observe.status import ActedOn, describe_operator_outcome

WHY = "; `inorder errors --view v --kind handler_error` says why"


def test_each_stream_is_told_by_what_happened_to_it():
    moved = ActedOn("s-moved", parked=False, last_seq=9, attempts=0, pending=0, parked_at=5)
    anew = ActedOn("s-anew", parked=True, last_seq=8, attempts=1, pending=2, parked_at=5)
    again = ActedOn("s-again", parked=True, last_seq=5, attempts=2, pending=3, parked_at=5)
    assert describe_operator_outcome("retry", "v", [moved, anew, again]) == (
        "retry of 3 parked streams of v committed: 1 stream moved on (the retried message applied, now at s-moved "
        "seq 9); 1 stream parked anew on a later message (the retried message applied, then s-anew seq 6 to 8, "
        f"parked at seq 9, attempt 1); 1 stream parked again: the retried message failed again (s-again seq 6, "
        f"attempt 2{WHY})")
    assert describe_operator_outcome("retry", "v", [anew]).endswith(f"attempt 1{WHY})")
    assert describe_operator_outcome("skip", "v", [moved]) == (
        "skip of 1 parked stream of v committed: 1 stream moved on (its parked message skipped (counted as "
        "handler_error), now at s-moved seq 9)")


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=25))
def test_every_stream_is_counted_once_under_the_one_thing_that_happened_to_it(shapes):
    streams = [ActedOn(f"s{i}", parked, at + moved, 1, 0, at) for i, (parked, at, moved) in enumerate(shapes)]
    said = describe_operator_outcome("retry", "v", streams)
    counts = {"moved on": sum(not s.parked for s in streams),
              "parked anew": sum(s.parked and s.last_seq > s.parked_at for s in streams),
              "parked again": sum(s.parked and s.last_seq == s.parked_at for s in streams)}
    for what, n in counts.items():
        assert (f"{n} stream{'s' if n != 1 else ''} {what}" in said) == (n > 0), said
