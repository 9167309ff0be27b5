"""Case 8 (`spark_state_peer`): the ordering core as the Spark job a Spark user would write instead.

    python -m bench.state_peer --events 1000000

The same handler-less view as case 3 (`bench_ordering`, bench/peer.py), the same archive, the same
compared figures; the peer is a Structured Streaming query: `transformWithStateInPandas` grouped by
stream, its state in the RocksDB state store, `Trigger.AvailableNow`, one micro-batch per ingest
entry (batches and ticks), in ingest order. Per stream it keeps a ValueState (last_seq, blocked_at,
blocked_since, pending count), a ListState pending buffer (seq and content, the first received of
each seq) and a ListState of the skipped ranges (for `late`). Per micro-batch it dedupes the
stream's new messages (duplicate, late, conflict), walks from last_seq + 1, skips a gap when it has
waited `gap_timeout` or the buffer holds more than `max_pending` (capacity), and starts a later
gap's timer at T, as inorder's walk does.

Logical time. Spark's timers know two clocks: the wall clock (processing time), which a
deterministic replay must never read, and the event-time watermark. The peer runs in EventTime
mode and makes the watermark the logical time T of the entry in progress: a blocked stream
registers a timer at blocked_since + gap_timeout, and Spark calls `handleExpiredTimer` for it in
the first micro-batch whose watermark reaches it, whether or not that entry (a tick, say) brings
the stream anything: that is CONCEPTS §2's "every batch and tick re-examines each stream that has a
pending buffer", done by timers instead of a scan. Spark moves the watermark only between
micro-batches, to the largest event time of the batches before, so each entry's file carries one
clock row whose event time is the NEXT entry's T (the feeder knows it: the archive's ingest log is
complete); a live job without that look-ahead would fire every timer one entry late. Messages
carry their entry's T in a column of their own and no event time, so none is ever dropped as late
by the watermark. Logical times are whole milliseconds here (Spark's watermark is in ms); inorder
keeps microseconds.

Every rule of the handler-less view is expressed; nothing is compared on a subset. The peer also
reports per stream its last_seq and pending count, which must equal inorder's watermarks table.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StructType

from bench.measure import RssSampler
from bench import data
from bench.peer import COMPARED, ORDERING_VIEW, inorder_ordering, ordering_entries
from pipelines.engine.ingest import archive_path
from pipelines.store.database import Home, Store
from pipelines.view import View

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
FEED_SCHEMA = pa.schema([("entry_idx", pa.int64()), ("line", pa.int64()), ("stream_id", pa.string()),
                         ("stream_type", pa.string()), ("seq", pa.int64()), ("event_type", pa.string()),
                         ("payload", pa.string()), ("occurred_at", pa.string()), ("event_id", pa.string()),
                         ("t_ms", pa.int64()), ("clock", pa.timestamp("us", tz="UTC"))])
FEED_STRUCT = from_arrow_schema(FEED_SCHEMA)
MESSAGE_COLUMNS = FEED_SCHEMA.names[:9]  # what the archive holds
PENDING_COLUMNS = ("seq", "entry_idx", "line", "event_type", "payload", "occurred_at", "event_id")
PENDING_STRUCT = StructType([FEED_STRUCT[c] for c in PENDING_COLUMNS])
CONTENT = slice(3, 7)  # event_type, payload, occurred_at, event_id: as pipelines.message.Message.content
OUTCOMES = ("selected", "processed", "duplicate", "late", "conflict", "gaps_skipped")
OUTPUT_DDL = "stream_id string, " + ", ".join(f"{c} long" for c in (*OUTCOMES, "last_seq_delta", "pending_delta"))
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class StreamOrdering:
    """One stream's state as loaded for one call, and the deltas the call produces."""

    def __init__(self, mark: tuple | None, first_seq: int) -> None:
        self.last_seq, self.blocked_at, self.blocked_since_ms, pending = mark or (first_seq - 1, None, None, 0)
        self.before = (self.last_seq, pending, self.blocked_since_ms)
        self.pending: dict[int, tuple] = {}
        self.counts = dict.fromkeys(OUTCOMES, 0)


class OrderingProcessor(StatefulProcessor):
    """CONCEPTS §2 step 3 per stream, for a view with no handlers (every ready message is processed)."""

    def __init__(self, gap_timeout_ms: int, max_pending: int, first_seq: int) -> None:
        self.gap_timeout_ms, self.max_pending, self.first_seq = gap_timeout_ms, max_pending, first_seq

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.mark = handle.getValueState("mark", "last_seq long, blocked_at long, blocked_since_ms long, pending long")
        self.buffer = handle.getListState("pending", PENDING_STRUCT)
        self.skipped = handle.getListState("skipped", "first_missing long, last_missing long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        if pd.isna(key[0]):  # the entry's clock row: it only moves the watermark
            return
        frame = pd.concat(list(rows)).sort_values("line")  # one entry's messages: first received first
        stream = self._load()
        self._arrive(stream, frame)
        self._walk(stream, int(frame["t_ms"].iat[0]))
        yield self._save(key[0], stream, gone_timer=None)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        stream = self._load()
        self._walk(stream, timerValues.getCurrentWatermarkInMs())  # the watermark is this entry's T
        yield self._save(key[0], stream, gone_timer=expiredTimerInfo.getExpiryTimeInMs())

    def _load(self) -> StreamOrdering:
        stream = StreamOrdering(self.mark.get(), self.first_seq)
        if stream.before[1]:  # a stream with nothing pending holds no buffer: no read
            stream.pending = {row[0]: row for row in self.buffer.get()}
        return stream

    def _arrive(self, stream: StreamOrdering, frame: pd.DataFrame) -> None:
        counts, pending = stream.counts, stream.pending
        counts["selected"] = len(frame)
        # Arrow hands integer columns over as floats when the micro-batch holds a null (the clock
        # row's), and a missing string as NaN: the state store takes neither for a long or a string
        integers = [frame[c].astype("int64").tolist() for c in PENDING_COLUMNS[:3]]
        strings = [frame[c].astype(object).where(frame[c].notna(), None).tolist() for c in PENDING_COLUMNS[3:]]
        skipped = None
        for row in zip(*integers, *strings):
            seq = row[0]
            if seq <= stream.last_seq:
                if skipped is None:
                    skipped = sorted(self.skipped.get())
                i = bisect.bisect_right(skipped, (seq, float("inf"))) - 1
                counts["late" if i >= 0 and skipped[i][0] <= seq <= skipped[i][1] else "duplicate"] += 1
            elif seq not in pending:
                pending[seq] = row
            else:
                counts["duplicate" if pending[seq][CONTENT] == row[CONTENT] else "conflict"] += 1

    def _walk(self, stream: StreamOrdering, t_ms: int) -> None:
        pending, nxt = stream.pending, stream.last_seq + 1
        while True:
            if pending.pop(nxt, None) is not None:
                stream.counts["processed"] += 1
                nxt += 1
                continue
            if not pending:
                stream.blocked_at = stream.blocked_since_ms = None
                break
            if stream.blocked_at != nxt:  # blocked at a new position: its own timer starts now
                stream.blocked_at, stream.blocked_since_ms = nxt, t_ms
            if t_ms - stream.blocked_since_ms < self.gap_timeout_ms and len(pending) <= self.max_pending:
                break
            first_waiting = min(pending)
            self.skipped.appendValue((nxt, first_waiting - 1))
            stream.counts["gaps_skipped"] += 1
            nxt = first_waiting
        stream.last_seq = nxt - 1

    def _deadline(self, blocked_since_ms: int | None) -> int | None:
        return None if blocked_since_ms is None else blocked_since_ms + self.gap_timeout_ms

    def _save(self, stream_id: str, stream: StreamOrdering, gone_timer: int | None) -> pd.DataFrame:
        last_seq_before, pending_before, since_before = stream.before
        if stream.pending:
            self.buffer.put(sorted(stream.pending.values()))
        elif pending_before:
            self.buffer.clear()
        self.mark.update((stream.last_seq, stream.blocked_at, stream.blocked_since_ms, len(stream.pending)))
        old, new = self._deadline(since_before), self._deadline(stream.blocked_since_ms)
        if old != new:  # one timer per blocked stream, at the moment its gap times out
            if old is not None and old != gone_timer:
                self.handle.deleteTimer(old)
            if new is not None:
                self.handle.registerTimer(new)
        return pd.DataFrame({"stream_id": [stream_id], **{k: [v] for k, v in stream.counts.items()},
                             "last_seq_delta": [stream.last_seq - last_seq_before],
                             "pending_delta": [len(stream.pending) - pending_before]})


def _ms(moment: datetime) -> int:
    return (moment - EPOCH) // (datetime.resolution * 1000)


def write_feed(home: Home, feed: Path) -> int:
    """One Parquet file per archived entry, oldest modification time first (the file source takes
    files in that order): the entry's messages with its logical time `t_ms`, and one clock row with
    no stream whose event time is the next entry's T (see the module's doc). Returns the entries."""
    entries = ordering_entries(home)
    times = [_ms(received_at) for _, _, received_at in entries]
    feed.mkdir(parents=True)
    for i, (entry_idx, kind, _) in enumerate(entries):
        if kind == "batch":
            messages = pq.read_table(archive_path(home, entry_idx), columns=MESSAGE_COLUMNS)
            messages = messages.cast(pa.schema(FEED_SCHEMA.field(c) for c in MESSAGE_COLUMNS))
        else:  # a tick brings nothing but its time
            messages = FEED_SCHEMA.empty_table().select(MESSAGE_COLUMNS)
        messages = messages.append_column("t_ms", pa.array([times[i]] * len(messages), pa.int64()))
        messages = messages.append_column("clock", pa.nulls(len(messages), FEED_SCHEMA.field("clock").type))
        next_t = times[min(i + 1, len(times) - 1)]
        clock = pa.table({"t_ms": [times[i]], "clock": pa.array([next_t * 1000], FEED_SCHEMA.field("clock").type)})
        path = feed / f"entry-{entry_idx:09d}.parquet"
        pq.write_table(pa.concat_tables([messages, clock], promote_options="default").select(FEED_SCHEMA.names), path)
        os.utime(path, (1_000_000_000 + i, 1_000_000_000 + i))
    return len(entries)


def stream_ordering(spark: SparkSession, feed: Path, out: Path, view: View, first_seq: int = 1) -> int:
    """The streaming query over the feed, to Parquet in `out`; returns its number of micro-batches."""
    gap_timeout_ms = -(-view.gap_timeout_us // 1000)  # T - since >= timeout, with T in whole ms
    messages = (spark.readStream.schema(FEED_STRUCT).option("maxFilesPerTrigger", 1).parquet(str(feed))
                .withWatermark("clock", "0 seconds")
                # one condition naming the event time, so Spark does not push it below the watermark
                # (which would drop the clock rows before their time is seen)
                .where(F.col("stream_type").isin(list(view.subscribes)) | F.col("clock").isNotNull())
                .groupBy("stream_id")
                .transformWithStateInPandas(OrderingProcessor(gap_timeout_ms, view.max_pending, first_seq),
                                            OUTPUT_DDL, "append", "EventTime"))
    previous = spark.conf.get(PROVIDER_KEY, None)
    spark.conf.set(PROVIDER_KEY, ROCKSDB)
    try:
        query = (messages.writeStream.format("parquet").option("path", str(out / "outcomes"))
                 .option("checkpointLocation", str(out / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
    finally:
        if previous is None:
            spark.conf.unset(PROVIDER_KEY)
        else:
            spark.conf.set(PROVIDER_KEY, previous)
    return query.lastProgress["batchId"] + 1 if query.lastProgress else 0


def peer_figures(home: Home, out: Path, view: View, first_seq: int = 1) -> tuple[dict, int]:
    """The peer's totals (COMPARED) and how many streams' last_seq or pending count differ from inorder's."""
    outcomes = str(out / "outcomes" / "*.parquet").replace("'", "''")
    with Store.open_read_only(home) as store:
        store.con.execute(f"""CREATE TEMP TABLE peer AS
            SELECT stream_id, {', '.join(f'sum({c}) AS {c}' for c in OUTCOMES)},
                   {int(first_seq) - 1} + sum(last_seq_delta) AS last_seq, sum(pending_delta) AS pending
            FROM read_parquet('{outcomes}') GROUP BY stream_id""")
        totals = store.con.execute(f"SELECT {', '.join(f'sum({c})' for c in OUTCOMES)}, sum(pending), "
                                   "sum(last_seq) FROM peer").fetchone()
        differing = store.con.execute(
            """SELECT count(*) FROM peer FULL JOIN (SELECT stream_id, last_seq, pending_count
                                                  FROM inorder.watermarks WHERE view = $view) mine USING (stream_id)
               WHERE peer.last_seq IS DISTINCT FROM mine.last_seq
                  OR peer.pending IS DISTINCT FROM mine.pending_count""",
            {"view": view.name}).fetchone()[0]
    return dict(zip(COMPARED, (int(v or 0) for v in totals))), differing


def run(spark: SparkSession, home: Home, work: Path, sampler: RssSampler, view: View = ORDERING_VIEW,
        inorder: dict | None = None) -> dict:
    """The peer over every archived entry of `home`, beside inorder's ordering of the same view
    (`inorder`: its figures when already measured on this home, as case 3 does; else measured here)."""
    mine = inorder or inorder_ordering(spark, home, sampler, view)
    shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    entries = write_feed(home, work / "feed")
    feed_s = time.perf_counter() - started
    started = time.perf_counter()
    with sampler.phase("state_peer"):
        micro_batches = stream_ordering(spark, work / "feed", work, view)
    peer_s = time.perf_counter() - started
    counts, differing = peer_figures(home, work, view)
    shutil.rmtree(work, ignore_errors=True)
    counts_match = counts == mine["counts"]
    return {"inorder": mine, "peer": {"wall_s": peer_s, "feed_s": feed_s, "counts": counts,
                                      "micro_batches": micro_batches, "entries": entries},
            "ratio": peer_s / mine["wall_s"], "counts_match": counts_match, "streams_differing": differing,
            "equal": counts_match and differing == 0 and micro_batches == entries, "not_expressed": []}


def main(argv: list[str] | None = None) -> int:
    from bench import bulk
    from pipelines.facade import ingest_batches

    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(prog="python -m bench.state_peer", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--work", default=str(root / ".inorder" / "bench"), help="inputs cache and scratch stores")
    args = p.parse_args(argv)
    work = Path(args.work)
    with RssSampler() as sampler:
        spark = data.session()
        inputs = data.bank_batches(work / "inputs", args.events)
        home = bulk.fresh_home(work / "state-peer-home")
        data.land(data.jsonl_files(inputs), home.landing)
        for batch in data.jsonl_files(inputs):  # archived as `inorder run` would, without projecting
            ingest_batches(home, (ORDERING_VIEW,), [batch.stem], now=bulk.T0)
        result = run(spark, home, work / "state-peer", sampler)
        spark.stop()
    shutil.rmtree(home.root, ignore_errors=True)
    print(json.dumps({"events": args.events, **result}, indent=1, default=str))
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
