"""Before/after studies that `python -m bench` does not run: a change that could move their figure re-runs
them, with the code before it and after it side by side (docs/BENCHMARKS.md has every figure so far).

- `walk_speed`: does the walk (the executor's body, no Spark) make as many handler calls per CPU-second
  after the change as before?
- `side_by_side` (with `side`, one checkout's side): is a wide pass (every stream with state) as fast,
  as lean by process role, and its store the same table by table, after the change as before?
"""
