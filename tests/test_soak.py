"""The soak harness at a small size (the 500-batch soak runs from `./scripts/reliability.sh`)."""

from tests.soak import soak


def test_small_soak_conserves_and_matches_model(spark, tmp_path):
    report = soak(spark, tmp_path / "soak", batches=15, events_per_batch=30, seed=11, sample_every=5)
    assert report.model_equal and report.batches == 15
    assert report.ticks > 0 and len(report.rss_mb) >= 3
