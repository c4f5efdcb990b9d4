# Thin aliases for tasks.py, which needs nothing but Python 3.11+.
.PHONY: demo test bench lint chaos
demo:
	python3 tasks.py demo
test:
	python3 tasks.py test
bench:
	python3 tasks.py bench
lint:
	.venv/bin/ruff check sqlq_orm tests
