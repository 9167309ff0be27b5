"""The Spark peer (bench/state_peer.py, issue 13) orders a few hundred events exactly as inorder does,
on an archive where gaps time out at batches and at ticks, buffers overflow `max_pending`, and
duplicates, conflicts and late messages arrive."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bench import state_peer
from bench.data import land
from bench.measure import RssSampler
from pipelines.facade import run
from pipelines.view import View
from demos.bank import GeneratorConfig, generate

# about 50 s (a streaming query and seven runs): issue 13 keeps .ci/run from getting longer
pytestmark = pytest.mark.long

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
# handler-less, like the bench's view, with a short timer and a small buffer so both kinds of skip happen
TIMED = View(name="bench_ordering_timed", tables=(), subscribes=("account",), gap_timeout=60.0,
             max_pending=4)


def test_state_peer_equals_inorder_with_timers_ticks_and_capacity(spark, tmp_path: Path, home) -> None:
    batches = generate(tmp_path / "inputs", GeneratorConfig(events=400, streams=16, batches=5, disorder=0.3,
                                                            duplicates=0.05, gaps=0.04, poison=0.0, seed=3))
    now = T0
    for i, batch in enumerate(batches):  # one run per batch, 45 s apart, and after every other batch a tick
        land([batch], home.landing)      # 70 s later: the streams blocked since then time out at the tick
        run(spark, home, (TIMED,), now=now)
        if i % 2:
            now += timedelta(seconds=70)
            run(spark, home, (TIMED,), now=now)
        now += timedelta(seconds=45)
    result = state_peer.run(spark, home, tmp_path / "peer", RssSampler(), view=TIMED)  # memory is not the point
    mine = result["inorder"]["counts"]
    assert mine["gaps_skipped"] > 0 and mine["late"] > 0 and mine["duplicate"] > 0, mine  # the rules are exercised
    assert result["peer"]["entries"] == len(batches) + len(batches) // 2  # batches and ticks
    assert result["peer"]["micro_batches"] == result["peer"]["entries"]
    assert result["peer"]["counts"] == mine
    assert result["streams_differing"] == 0
    assert result["equal"]
