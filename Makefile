# The benchmark suite (bench/). Both targets install everything first (scripts/setup.sh is idempotent).
.PHONY: bench bench-quick mutation

bench:
	bash scripts/setup.sh
	.venv/bin/python -m bench

bench-quick:
	bash scripts/setup.sh
	.venv/bin/python -m bench --quick

# Mutation testing of the ordering core (pipelines/engine/order.py, apply.py, normalise.py) with the fast tests
# (pyproject.toml [tool.mutmut]); prints killed / survived / timeout per file. Not part of CI: it takes
# about 10 minutes on 2 cores. Survivors no test kills are explained in docs/mutants_explained.toml.
mutation:
	bash scripts/setup.sh
	.venv/bin/python -m pip install -q -r requirements-mutation.lock
	rm -rf mutants
	HYPOTHESIS_PROFILE=mutation .venv/bin/python -m tests.postgres_server .venv/bin/mutmut run  # one PostgreSQL server for every mutant
	.venv/bin/python scripts/mutation_report.py
