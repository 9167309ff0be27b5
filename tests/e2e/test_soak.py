"""The soak harness at a small size (the 500-batch soak runs from `./scripts/reliability.sh`)."""

from tests.soak import soak

# The driver's resident memory (where the walk, the handlers' state and the commit live) may not grow
# by more than this over the second half of 30 batches (over 15, one page-sized step of 1–2 MB between
# four samples already read as 20 MB per 100 entries). The Spark JVM's is left out here: the test
# session's one JVM is still growing its heap towards its limit after the tests before this one (300 MB
# per 100 entries in a measured run); the 500-batch soak bounds what the engine retains, the driver and
# the JVM heap alive after a full collection (tests/soak.py).
DRIVER_MAX_TREND_MB_PER_100 = 20.0


def test_small_soak_conserves_matches_the_model_and_the_driver_keeps_its_memory(spark, tmp_path):
    report = soak(spark, tmp_path / "soak", batches=30, events_per_batch=30, seed=11, sample_every=2)
    assert report.model_equal and report.batches == 30
    assert report.ticks > 0 and len(report.memory) >= 15
    driver_slope, _ = report.trend("driver")
    assert driver_slope < DRIVER_MAX_TREND_MB_PER_100, report.memory
