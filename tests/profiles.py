"""Hypothesis profiles (HYPOTHESIS_PROFILE; scripts/test.sh, as CI runs it, uses `ci`).

They set how many examples the tests draw that do not fix their own number: the fast model tests
(tests/fast/test_model_vs_replay.py). `./scripts/test.sh --fast` runs under `fast`, and `make mutation` each
mutant under `mutation`, where the property tests that do fix theirs draw a fifth and a tenth (`examples`).
The engine's model properties through Spark (`spark_examples`) draw half their number in CI and five times
it nightly."""

from __future__ import annotations

import os

from hypothesis import Phase, settings

settings.register_profile("dev", max_examples=200)
settings.register_profile("ci", max_examples=500, derandomize=True, print_blob=True)
settings.register_profile("nightly", max_examples=20_000)
# `./scripts/test.sh --fast`, the loop after every change: a fifth of the examples, new ones every run
settings.register_profile("fast", max_examples=100)
# A mutant is killed by its first failing example: shrinking it would only spend the mutant's time limit.
settings.register_profile("mutation", max_examples=60, derandomize=True,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """`n` examples; a fifth of them (at least 10) in the `fast` profile, a tenth (at least 30) for each mutant
    of `make mutation`."""
    return {"mutation": max(n // 10, 30), "fast": max(n // 5, 10)}.get(PROFILE, n)


def spark_examples(n: int) -> int:
    """`n` examples of a model property through Spark, each several engine runs of seconds each: half of them
    (at least 3) in CI, whose profile draws the same examples every time, and five times `n` nightly, which
    draws new ones (docs/TESTING.md)."""
    return {"ci": max(n // 2, 3), "nightly": n * 5}.get(PROFILE, n)
