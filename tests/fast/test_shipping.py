"""What a pass ships through the driver when the executors cannot read its files, and where its scratch
files live (issue: a cluster that helps). The cluster runs themselves are in tests/e2e/test_cluster.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.engine.inputs import PassInputs, pass_folder
from pipelines.engine.output import INPUT_ROWS_METRIC, PassResult
from pipelines.engine.pass_data import OutputKind
from pipelines.engine.spark_pass import (InputsMismatch, TooMuchToShip, check_inputs_columns, check_inputs_rows,
                                         check_shipped, shipped_bytes)
from pipelines.config import Settings
from pipelines.store.database import Home


def test_the_shipped_bytes_are_the_state_file_and_the_archive_files(tmp_path):
    state, a, b = tmp_path / "inputs.parquet", tmp_path / "a.parquet", tmp_path / "b.parquet"
    state.write_bytes(b"x" * 100)
    a.write_bytes(b"x" * 30)
    b.write_bytes(b"x" * 12)
    assert shipped_bytes(PassInputs(state, 3, ("view",)), [str(a), str(b)]) == 142
    assert shipped_bytes(None, [str(a)]) == 30


def test_a_pass_over_the_bound_is_refused_in_one_line_that_says_what_to_set():
    check_shipped(256 << 20, 256 << 20)  # at the bound: shipped
    with pytest.raises(TooMuchToShip) as refused:
        check_shipped((256 << 20) + 1, 256 << 20)
    line = str(refused.value)
    assert "\n" not in line and "INORDER_SHIP_LIMIT_MB=256" in line
    assert "INORDER_ARCHIVE_SHARED=1 and INORDER_SCRATCH" in line and "INORDER_PASS_STREAMS" in line


def test_a_shared_scratch_folder_gives_each_home_a_folder_of_its_own(tmp_path):
    assert pass_folder(Home.of(Settings(), tmp_path / "one")) == tmp_path / "one" / "scratch" / "pass"
    shared = Settings(scratch=str(tmp_path / "shared"))
    one, two = pass_folder(Home.of(shared, tmp_path / "one")), pass_folder(Home.of(shared, tmp_path / "two"))
    assert one.parent.parent == two.parent.parent == tmp_path / "shared"
    assert one != two and one.name == two.name == "pass"
    assert one == pass_folder(Home.of(shared, tmp_path / "one"))  # the same home, the same folder


def _walked(*rows_per_partition: int) -> PassResult:
    """A pass result whose partitions report reading these many state and buffer rows."""
    metric = OutputKind.METRIC.value
    return PassResult(summary=pa.table({"kind": [metric] * len(rows_per_partition), "view": [None] * len(rows_per_partition),
                                        "name": [INPUT_ROWS_METRIC] * len(rows_per_partition),
                                        "n": list(rows_per_partition)}))


def test_a_pass_that_read_other_state_than_the_planner_wrote_is_refused_in_one_line(tmp_path):
    """Issue 32's defence in depth: the walk's state must be the planner's file, columns and rows."""
    inputs = PassInputs(tmp_path / "inputs-1.parquet", 5, ("view", "stream_id", "bank:accounts", "holds:holds"))
    check_inputs_columns(["view", "stream_id", "bank:accounts", "holds:holds"], inputs)
    for read in (["view", "stream_id", "bank:accounts"], ["view", "stream_id", "holds:holds", "bank:accounts"]):
        with pytest.raises(InputsMismatch) as refused:
            check_inputs_columns(read, inputs)
        assert "\n" not in str(refused.value) and "nothing was committed" in str(refused.value)
    assert "holds:holds differ" in str(pytest.raises(InputsMismatch, check_inputs_columns,
                                                     ["view", "stream_id", "bank:accounts"], inputs).value)
    check_inputs_rows(_walked(2, 3), inputs)
    check_inputs_rows(_walked(), None)
    for wrong in (_walked(2, 2), _walked(2, 3, 1), _walked()):
        with pytest.raises(InputsMismatch, match="planner wrote 5"):
            check_inputs_rows(wrong, inputs)
    with pytest.raises(InputsMismatch, match="read 1 state and buffer rows where the planner wrote 0"):
        check_inputs_rows(_walked(1), None)
