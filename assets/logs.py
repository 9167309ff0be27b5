"""`errors` and `gaps`: the error log and the gap log of the read store, as assets.

They are outputs of the projection step (assets/views.py), so they are materialised after its
commit in the same step, whether or not every view changed."""

import dagster as dg

from pipelines.observe.status import newest_errors
from pipelines.store.database import Store

def _schema(*columns: tuple[str, str, str]) -> dict:
    return {"dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(n, t, description=d) for n, t, d in columns])}


ERRORS_SCHEMA = _schema(
    ("error_id", "BIGINT", "row id, in the order rows were logged"),
    ("view", "VARCHAR", "the view (NULL for malformed records, which no view saw)"),
    ("stream_id", "VARCHAR", "the message's stream"), ("seq", "BIGINT", "the message's seq"),
    ("kind", "VARCHAR", "malformed, handler_error, late or conflict"),
    ("event_type", "VARCHAR", "the message's event type"), ("payload", "VARCHAR", "the message's payload (JSON)"),
    ("occurred_at", "VARCHAR", "the message's occurred_at"), ("event_id", "VARCHAR", "the message's event id"),
    ("batch_id", "VARCHAR", "the batch the message (or record) came in"), ("line", "BIGINT", "its line in that batch"),
    ("raw", "VARCHAR", "a malformed record's text, truncated to 4 KiB"),
    ("reason", "VARCHAR", "why: the malformation, the handler's message, the skipped gap, the first copy"),
    ("exception_type", "VARCHAR", "a handler error's exception class"),
    ("message", "VARCHAR", "a handler error's message"), ("traceback", "VARCHAR", "a handler error's traceback"),
    ("logged_at", "TIMESTAMPTZ", "logical time of the entry that logged it"),
    ("entry_idx", "BIGINT", "that entry"), ("error_class", "VARCHAR", "reject (business refusal) or bug"),
    ("attempt", "BIGINT", "1, 2, … for a parked message retried"))
GAPS_SCHEMA = _schema(
    ("view", "VARCHAR", "the view"), ("stream_id", "VARCHAR", "the stream"),
    ("first_missing", "BIGINT", "first seq skipped"), ("last_missing", "BIGINT", "last seq skipped"),
    ("waited_seconds", "DOUBLE", "logical seconds the stream waited for them"),
    ("reason", "VARCHAR", "timeout (gap_timeout passed) or capacity (over max_pending)"),
    ("batch_id", "VARCHAR", "the entry whose walk skipped them"),
    ("skipped_at", "TIMESTAMPTZ", "logical time of that entry"), ("entry_idx", "BIGINT", "that entry"))

LOG_SPECS = [
    dg.AssetSpec("errors", group_name="logs", kinds={"duckdb"}, skippable=True, metadata=ERRORS_SCHEMA,
                 description="inorder.errors: malformed records, handler errors, late messages, conflicts; "
                             "and the rejected batch files of the ingest log."),
    dg.AssetSpec("gaps", group_name="logs", kinds={"duckdb"}, skippable=True, metadata=GAPS_SCHEMA,
                 description="inorder.gaps: every skipped range of seqs, with how long it was waited for and why."),
]


def _counts(store: Store, sql: str) -> dict[str, int]:
    return {key: int(n) for key, n in store.con.execute(sql).fetchall()}


def errors_metadata(store: Store) -> dict:
    by_kind = _counts(store, "SELECT kind, count(*) FROM inorder.errors GROUP BY ALL ORDER BY 1")
    by_view_kind = _counts(store, "SELECT coalesce(view, '(ingest)') || ' / ' || kind, count(*) "
                                  "FROM inorder.errors GROUP BY ALL ORDER BY 1")
    rejected = store.con.execute("SELECT batch_id, reason FROM inorder.ingest_log WHERE status = 'rejected' "
                                 "ORDER BY entry_idx").fetchall()
    return {
        "total": dg.MetadataValue.int(sum(by_kind.values())),
        **{f"kind/{kind}": dg.MetadataValue.int(n) for kind, n in by_kind.items()},
        "by_view_and_kind": dg.MetadataValue.json(by_view_kind),
        "rejected_batches": dg.MetadataValue.int(len(rejected)),
        "rejected": dg.MetadataValue.md("\n".join(f"- `{b}`: {r}" for b, r in rejected) or "none"),
        "newest_errors": dg.MetadataValue.md(newest_errors(store.con, limit=20)),
        "dagster/row_count": dg.MetadataValue.int(sum(by_kind.values())),
    }


def gaps_metadata(store: Store) -> dict:
    by_view_reason = _counts(store, "SELECT view || ' / ' || reason, count(*) FROM inorder.gaps "
                                    "GROUP BY ALL ORDER BY 1")
    missing = store.con.execute(
        "SELECT coalesce(sum(last_missing - first_missing + 1), 0) FROM inorder.gaps").fetchone()[0]
    total = sum(by_view_reason.values())
    return {
        "total": dg.MetadataValue.int(total),
        "seqs_skipped": dg.MetadataValue.int(int(missing)),
        "by_view_and_reason": dg.MetadataValue.json(by_view_reason),
        "dagster/row_count": dg.MetadataValue.int(total),
    }


LOG_METADATA = {"errors": errors_metadata, "gaps": gaps_metadata}
