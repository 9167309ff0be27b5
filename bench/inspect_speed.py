"""Inspection speed, side by side: the frozen per-line normaliser (bench/inspect_reference.py) against the
live one, on the same bank batches, in one process, file by file in turn (so a busy machine slows both alike):

    python -m bench.inspect_speed [EVENTS ...]        # default 100000 1000000

Each file is inspected REPEATS times by each (env INSPECT_REPEATS, default 3) and the fastest time counts. Times
are this process's CPU seconds: inspection is one thread, and the CPU time of a busy machine is steadier than
its wall-clock time.
Prints records/s of each and the ratio; checks on the way that both give the same messages and malformed rows.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pipelines.engine.normalise as live
import bench.inspect_reference as reference
from bench import data


def _timed(module, path: Path):
    start = time.process_time()
    batch = module.inspect_file(path, path.stem, 1, module.SourceMapping())
    return time.process_time() - start, batch


def compare(folder: Path, repeats: int) -> dict:
    """Seconds each implementation took over every file of `folder` (the fastest of `repeats` tries per
    file), and the records they saw."""
    seconds = {"reference": 0.0, "live": 0.0}
    records = 0
    for path in data.jsonl_files(folder):
        tries = [(_timed(reference, path), _timed(live, path)) for _ in range(repeats)]
        (_, old), (_, new) = tries[0]
        assert new.messages.equals(old.messages) and new.malformed == old.malformed, path
        seconds["reference"] += min(old_s for (old_s, _), _ in tries)
        seconds["live"] += min(new_s for _, (new_s, _) in tries)
        records += old.records
    return {"records": records, **seconds}


def main(sizes: list[int]) -> None:
    cache = Path(tempfile.gettempdir()) / "inorder-bench-inputs"
    for events in sizes:
        result = compare(data.bank_batches(cache, events), int(os.environ.get("INSPECT_REPEATS", "3")))
        old, new = result["records"] / result["reference"], result["records"] / result["live"]
        print(f"{result['records']:>10,} records: reference {old:>9,.0f} records/s ({result['reference']:.2f} s), "
              f"live {new:>9,.0f} records/s ({result['live']:.2f} s), live / reference = {new / old:.2f} x",
              flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100_000, 1_000_000])
