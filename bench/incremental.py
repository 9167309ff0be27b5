"""Case 5: a batch committed onto an empty store and onto a store that already holds N events,
back to back in the same Spark session. The batch's streams are its own (`inc<round>-…`), so the
work on the batch is the same; what differs is the history, and the pending buffers it holds.

A latency of about a second moves by a tenth from run to run, so the case runs
data.INCREMENTAL_ROUNDS rounds (each: a fresh empty store, then the full store, each with that
round's batch) and reports medians."""

from __future__ import annotations

import statistics
from datetime import timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from bench.bulk import T0, fresh_home
from bench.data import land
from bench.measure import RssSampler
from pipelines.facade import run
from pipelines.store.database import Home
from bench.data import BANK_VIEWS

T_INCREMENT = T0 + timedelta(seconds=60)  # before any gap of the bulk run times out


def commit_batch(spark: SparkSession, home: Home, batch: Path, sampler: RssSampler, phase: str) -> dict:
    land([batch], home.landing)
    with sampler.phase(phase):
        report = run(spark, home, BANK_VIEWS, now=T_INCREMENT)
    events = sum(r.records for r in report.ingested)
    return {"events": events, "latency_s": report.seconds, "ingest_s": report.ingest_seconds,
            "spark_s": report.projection.spark_seconds, "commit_s": report.projection.commit_seconds,
            "streams_touched": sum(report.projection.streams_touched.values())}


def onto_empty(spark: SparkSession, work: Path, batch: Path, sampler: RssSampler) -> dict:
    return commit_batch(spark, fresh_home(work), batch, sampler, "incremental-empty")


def onto_store(spark: SparkSession, home: Home, batch: Path, store_events: int, sampler: RssSampler) -> dict:
    result = commit_batch(spark, home, batch, sampler, "incremental")
    return {**result, "store_events": store_events}


def rounds(spark: SparkSession, work: Path, home: Home, batches: list[Path], store_events: int,
           sampler: RssSampler) -> dict:
    """Interleaved rounds (empty, full, empty, full …): the medians, their ratio and every sample."""
    empty, full = [], []
    for i, batch in enumerate(batches, 1):
        empty.append(onto_empty(spark, work / f"empty-{i}", batch, sampler))
        full.append(onto_store(spark, home, batch, store_events, sampler))

    def median(samples: list[dict]) -> dict:
        return {**samples[0], "latency_s": statistics.median(s["latency_s"] for s in samples),
                "samples_s": [s["latency_s"] for s in samples]}

    result = {"empty": median(empty), "full": median(full), "rounds": len(batches)}
    result["ratio"] = result["full"]["latency_s"] / result["empty"]["latency_s"]
    return result
