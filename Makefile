# The benchmark suite (bench/). Both targets install everything first (scripts/setup.sh is idempotent).
.PHONY: bench bench-quick

bench:
	bash scripts/setup.sh
	.venv/bin/python -m bench

bench-quick:
	bash scripts/setup.sh
	.venv/bin/python -m bench --quick
