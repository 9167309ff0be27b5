"""`inorder checks`: the latest verdict of every check of the home, read from its Dagster instance, where each
run (`inorder run`, `rebuild`, `retry`, `skip`, `publish`, and the daemon's) records the checks it evaluated.
Nothing is evaluated here, and nothing of the engine is imported: Dagster's instance API only (not `assets`,
which loads Spark's session code)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from pipelines.observe.checks import FILE_CHECK, INGEST_CHECKS, VIEW_CHECKS
from pipelines.store.database import Home

INGEST_ASSET = "event_batches"


def dagster_folder(home: Home) -> Path:
    """The home's Dagster instance folder: DAGSTER_HOME, by default under INORDER_HOME."""
    return Path(os.environ.get("DAGSTER_HOME") or home.root / "dagster").resolve()


@dataclass(frozen=True)
class Verdict:
    """A check's latest evaluation (None everywhere when it has none yet)."""

    asset: str  # the view, or event_batches
    check: str
    verdict: str | None  # passed, warned (a warning-severity check that did not pass), failed; None: never evaluated
    severity: str | None  # ERROR or WARN
    description: str | None
    evaluated_at: datetime | None
    run_id: str | None
    metadata: dict[str, object]  # each value plain: text, a number, JSON; a Markdown one as its text
    markdown: tuple[str, ...]  # the metadata shown as Markdown (reasons, the GX results table…)

    def document(self) -> dict:
        """The check in `inorder checks --json` (docs/CLI.md lists the keys)."""
        return {"asset": self.asset, "check": self.check, "verdict": self.verdict, "severity": self.severity,
                "description": self.description, "evaluated_at": self.evaluated_at, "run_id": self.run_id,
                "next_command": self.metadata.get("next_command"), "metadata": self.metadata}


def latest_verdicts(home: Home, view_names: Sequence[str], ingest_log: bool) -> list[Verdict]:
    """Each view's checks, then (`ingest_log`) the ingest log's, as their latest evaluation left them. A home
    with no Dagster instance yet has evaluated none: nothing is made for it."""
    checks = [(view, check) for view in view_names for check in VIEW_CHECKS]
    # the per-partition check's latest verdict is its newest file's, as a run counts it
    checks += [(INGEST_ASSET, check) for check in (FILE_CHECK, *INGEST_CHECKS) if ingest_log]
    folder = dagster_folder(home)
    if not (folder / "dagster.yaml").exists():
        return [_unevaluated(asset, check) for asset, check in checks]
    import dagster as dg
    from dagster._core.storage.asset_check_execution_record import COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES

    with dg.DagsterInstance.from_config(str(folder)) as instance:
        found = []
        for asset, check in checks:
            records = instance.event_log_storage.get_asset_check_execution_history(
                dg.AssetCheckKey(dg.AssetKey(asset), check), limit=1,
                status=COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES)
            found.append(_verdict(asset, check, records[0]) if records else _unevaluated(asset, check))
    return found


def _unevaluated(asset: str, check: str) -> Verdict:
    return Verdict(asset, check, None, None, None, None, None, {}, ())


def _verdict(asset: str, check: str, record) -> Verdict:
    import dagster as dg

    evaluation = record.evaluation
    if evaluation is None:
        return _unevaluated(asset, check)
    warn = evaluation.severity == dg.AssetCheckSeverity.WARN
    return Verdict(
        asset, check, "passed" if evaluation.passed else "warned" if warn else "failed",
        "WARN" if warn else "ERROR", evaluation.description,
        datetime.fromtimestamp(record.event.timestamp, timezone.utc), record.run_id,
        {name: value.value for name, value in evaluation.metadata.items()},
        tuple(name for name, value in evaluation.metadata.items() if isinstance(value, dg.MarkdownMetadataValue)))


def format_verdicts(verdicts: Sequence[Verdict]) -> list[str]:
    """Per asset, a line per check; under a check that did not pass, its description, its reasons and tables,
    and the next command; under the expectations check, its GX results table whatever its verdict."""
    lines: list[str] = []
    for asset in dict.fromkeys(v.asset for v in verdicts):
        own = [v for v in verdicts if v.asset == asset]
        newest = max((v for v in own if v.evaluated_at), key=lambda v: v.evaluated_at, default=None)
        # the clock's time the checks ran, not the logical time of what they judged (a `--now` run's)
        when = newest and newest.evaluated_at.isoformat(timespec="seconds")
        lines.append(f"{asset}: " + (f"latest verdicts, evaluated at {when} by the clock (run {newest.run_id})"
                                     if newest else "no check evaluated yet"))
        for v in own:
            lines += _check_lines(v)
    return lines


def _check_lines(v: Verdict) -> list[str]:
    said = {"passed": "passed", "warned": "warning", "failed": "FAILED", None: "not evaluated yet"}[v.verdict]
    lines = [f"  {v.check}: {said}" + (f": {v.description}" if v.description and v.verdict != "passed" else "")]
    shown = v.markdown if v.verdict in ("warned", "failed") else ("results",) if "results" in v.markdown else ()
    for name in shown:
        lines.append(f"    {name}:")
        lines += [f"      {line}" for line in str(v.metadata[name]).splitlines()]
    if v.verdict in ("warned", "failed") and v.metadata.get("next_command"):
        lines.append(f"    next: {v.metadata['next_command']}")
    return lines
