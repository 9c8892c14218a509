# The two entry points of the README. Both set up .venv first (scripts/setup.sh; a no-op when done).
PY := .venv/bin/python
OUT ?= reports
DEVICE ?= auto

.PHONY: setup report test

setup:
	@bash scripts/setup.sh

report: setup
	$(PY) -m workbench --device $(DEVICE) report --out $(OUT)

test: setup
	$(PY) -m pytest -q
