# The benchmark suite (bench/). Both targets install everything first (scripts/setup.sh is idempotent).
.PHONY: bench bench-quick mutation

bench:
	bash scripts/setup.sh
	.venv/bin/python -m bench

bench-quick:
	bash scripts/setup.sh
	.venv/bin/python -m bench --quick

# Mutation testing (pyproject.toml [tool.mutmut], docs/TESTING.md) with the tests that need no JVM; prints killed /
# survived / timeout per file. Not part of CI: it takes about an hour on 2 cores. Survivors are explained in
# docs/mutants_explained.toml.
mutation:
	bash scripts/setup.sh
	.venv/bin/python -m pip install -q -r requirements-mutation.lock
	rm -rf mutants
	HYPOTHESIS_PROFILE=mutation .venv/bin/python -m tests.postgres_server .venv/bin/mutmut run  # one PostgreSQL server for every mutant
	.venv/bin/python scripts/mutation_report.py
