# Thin aliases for tasks.py, which needs nothing but Python 3.11+.
.PHONY: demo test bench lint chaos
demo:
	python3 tasks.py demo
test:
	python3 tasks.py test
bench:
	python3 tasks.py bench
lint:
	python3 tasks.py lint
# SQLQ_CHAOS_MINUTES (default 10) and SQLQ_CHAOS_SEED (replay) tune the long soak.
chaos:
	python3 tasks.py test -m chaos_long -s tests/worker/test_chaos.py
