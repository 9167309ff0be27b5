"""Which source mapping reads which landing file: what `$INORDER_HOME/source.json` holds.

Either one mapping (`{"stream_id": …, "seq": …}`, or no file: the default record shape), which reads
every file of `landing/` itself, as every home did before a home held several feeds; or several, under
`sources`, each taking the files its `match` (a glob on the file name) and `folder` (a sub-folder of
`landing/`) select, in `landing/` and its sub-folders. A file that no mapping of several takes, or that
two take, is never read with a mapping that was not meant for it: it is refused with the reason, and
set aside as a rejected batch like any file that cannot be read (docs/CLI.md, Source mapping).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from pipelines.engine.normalise import RejectedFile, SourceMapping

SELECTORS = ("match", "folder")


@dataclass(frozen=True)
class Feed:
    """One mapping of several, and the landing files it takes: those both its selectors take (a selector
    that is not set takes every file)."""

    mapping: SourceMapping
    match: str | None = None  # a glob on the file's name, wherever it lies: "payments-*.jsonl"
    folder: str | None = None  # a sub-folder of landing/: its files, at any depth below it

    def takes(self, name: PurePosixPath) -> bool:
        """Whether it reads the landing file `name` (its path under landing/)."""
        in_folder = self.folder is None or PurePosixPath(self.folder) in name.parents
        return in_folder and (self.match is None or fnmatchcase(name.name, self.match))

    def describe(self) -> str:
        return " and ".join(f"{key} {value!r}" for key, value in (("folder", self.folder), ("match", self.match))
                            if value is not None)


@dataclass(frozen=True)
class Sources:
    """Several feeds in one home: `{"sources": [{"match": …, mapping keys…}, {"folder": …, …}]}`."""

    feeds: tuple[Feed, ...]

    reads_subfolders = True  # a folder feed's files lie in sub-folders of landing/

    @property
    def first_seq(self) -> int:
        """The walk's, one per home (every feed agrees on it: `from_dict` refuses a source.json where not)."""
        return self.feeds[0].mapping.first_seq

    def mapping_for(self, name: PurePosixPath) -> SourceMapping:
        """The mapping that reads landing file `name`; RejectedFile when none or several take it."""
        taking = [(i, feed) for i, feed in enumerate(self.feeds, start=1) if feed.takes(name)]
        if len(taking) == 1:
            return taking[0][1].mapping
        if not taking:
            offered = "; ".join(f"{i}: {feed.describe()}" for i, feed in enumerate(self.feeds, start=1))
            raise RejectedFile(f"no source of source.json takes this file (they take {offered}); add one whose "
                               "`match` or `folder` takes it")
        which = "; ".join(f"{i}: {feed.describe()}" for i, feed in taking)
        raise RejectedFile(f"{len(taking)} sources of source.json take this file ({which}); change their "
                           "`match` or `folder` so that one takes it")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Sources":
        others = sorted(set(data) - {"sources"})
        if others:
            raise ValueError(f"source.json has `sources` and other keys {others}: with `sources`, each source "
                             "holds its own mapping keys")
        listed = data["sources"]
        if not isinstance(listed, list) or not listed or not all(isinstance(s, dict) for s in listed):
            raise ValueError("source.json's `sources` must be a list of one object per source, none empty")
        feeds = tuple(_feed(i, source) for i, source in enumerate(listed, start=1))
        first_seqs = sorted({feed.mapping.first_seq for feed in feeds})
        if len(first_seqs) > 1:
            raise ValueError(f"source.json's sources give first_seq {first_seqs}: the walk starts every stream of a "
                             "home at one first_seq, so give every source the same")
        return cls(feeds)


def _feed(i: int, source: Mapping[str, Any]) -> Feed:
    selectors = {key: source[key] for key in SELECTORS if key in source}
    if not selectors:
        raise ValueError(f"source {i} of source.json selects no file: give it `match` (a glob on the file name) "
                         "or `folder` (a sub-folder of landing/), or both")
    if not all(isinstance(value, str) and value for value in selectors.values()):
        raise ValueError(f"source {i} of source.json: `match` and `folder` are non-empty strings")
    if "/" in selectors.get("match", ""):
        raise ValueError(f"source {i} of source.json: `match` is a glob on the file name, without a folder; "
                         "select a folder with `folder`")
    folder = selectors.get("folder")
    if folder is not None:
        parts = PurePosixPath(folder).parts
        if folder.startswith("/") or ".." in parts or any(p.startswith(".") for p in parts):
            raise ValueError(f"source {i} of source.json: `folder` {folder!r} is no sub-folder of landing/ "
                             "(a relative path, with no `..` nor hidden folder)")
        folder = PurePosixPath(folder).as_posix()
    try:
        mapping = SourceMapping.from_dict({k: v for k, v in source.items() if k not in SELECTORS})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"source {i} of source.json: {exc}") from None
    return Feed(mapping, selectors.get("match"), folder)


Source = SourceMapping | Sources  # what source.json holds


def load_source(path: Path) -> Source:
    """source.json: several feeds (`sources`), one mapping, or the default shape when there is no file."""
    if not path.exists():
        return SourceMapping()
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("source.json must hold one JSON object (docs/CLI.md, Source mapping)")
    if "sources" in data:
        return Sources.from_dict(data)
    if set(SELECTORS) & set(data):
        raise ValueError("`match` and `folder` choose a source's files among several: list the sources under "
                         "`sources` (docs/CLI.md, Source mapping)")
    return SourceMapping.from_dict(data)
