"""`errors` and `gaps`: the error log and the gap log of the read store, as assets.

They are outputs of the projection step (assets/views.py), so they are materialised after its
commit in the same step, whether or not every view changed."""

from typing import Sequence

import dagster as dg

from pipelines.observe.status import newest_errors
from pipelines.store.database import Store
from pipelines.store.layout import ERRORS_COLUMNS, GAPS_COLUMNS, LogColumn
from pipelines.view import View


def _schema(columns: tuple[LogColumn, ...]) -> dict:
    """The Dagster column schema of a log table, from the columns its DDL is made of."""
    return {"dagster/column_schema": dg.TableSchema(columns=[
        dg.TableColumn(c.name, c.sql_type, description=c.description) for c in columns])}


ERRORS_SCHEMA, GAPS_SCHEMA = _schema(ERRORS_COLUMNS), _schema(GAPS_COLUMNS)



def log_specs(views: Sequence[View]) -> list[dg.AssetSpec]:
    """The logs' assets, in group `logs`, downstream of what writes them in the UI's lineage: `errors` of
    `event_batches` (malformed records, rejected files) and of every view, `gaps` of every view."""
    names = [view.name for view in views]
    return [
        dg.AssetSpec("errors", deps=["event_batches", *names], group_name="logs", kinds={"duckdb"}, skippable=True,
                     metadata=ERRORS_SCHEMA,
                     description="inorder.errors: malformed records, handler errors, late messages, conflicts; "
                                 "and the rejected batch files of the ingest log. Malformed rows a re-ingest "
                                 "superseded are counted apart (superseded_malformed)."),
        dg.AssetSpec("gaps", deps=names, group_name="logs", kinds={"duckdb"}, skippable=True, metadata=GAPS_SCHEMA,
                     description="inorder.gaps: every skipped range of seqs, with how long it was waited for and why."),
    ]


def _counts(store: Store, sql: str) -> dict[str, int]:
    return {key: int(n) for key, n in store.con.execute(sql).fetchall()}


def errors_metadata(store: Store) -> dict:
    """The counts `inorder errors` gives: the malformed rows a re-ingest superseded are counted apart."""
    counting = "FROM inorder.errors WHERE superseded_by IS NULL GROUP BY ALL ORDER BY 1"
    by_kind = _counts(store, f"SELECT kind, count(*) {counting}")
    by_view_kind = _counts(store, f"SELECT coalesce(view, '(ingest)') || ' / ' || kind, count(*) {counting}")
    superseded = store.con.execute("SELECT count(superseded_by) FROM inorder.errors").fetchone()[0]
    rejected = store.con.execute("SELECT batch_id, reason FROM inorder.ingest_log WHERE status = 'rejected' "
                                 "ORDER BY entry_idx").fetchall()
    return {
        "total": dg.MetadataValue.int(sum(by_kind.values())),
        **{f"kind/{kind}": dg.MetadataValue.int(n) for kind, n in by_kind.items()},
        "by_view_and_kind": dg.MetadataValue.json(by_view_kind),
        "superseded_malformed": dg.MetadataValue.int(superseded),
        "rejected_batches": dg.MetadataValue.int(len(rejected)),
        "rejected": dg.MetadataValue.md("\n".join(f"- `{b}`: {r}" for b, r in rejected) or "none"),
        "newest_errors": dg.MetadataValue.md(newest_errors(store.con, limit=20)),
        "dagster/row_count": dg.MetadataValue.int(sum(by_kind.values()) + superseded),  # the table's rows
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
