"""Markdown tables, as the Dagster UI renders `MetadataValue.md` (one writer for every table it shows)."""

from __future__ import annotations

from typing import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], width: int = 120) -> str:
    """A cell shows at most `width` characters of its value; None shows as "-"."""
    def cell(value: object) -> str:
        return "-" if value is None else str(value).replace("|", "\\|").replace("\n", " ")[:width]

    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    lines += [f"| {' | '.join(cell(v) for v in row)} |" for row in rows]
    return "\n".join(lines)
