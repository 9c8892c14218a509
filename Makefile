# The two entry points of the README. Both set up .venv first (scripts/setup.sh; a no-op when done).
PY := .venv/bin/python
OUT ?= reports
DEVICE ?= auto

.PHONY: setup report test test-slow releases vllm-releases

setup:
	@bash scripts/setup.sh

report: setup
	$(PY) -m workbench --device $(DEVICE) report --out $(OUT)

# One pytest worker per core (pytest-xdist); a file's tests stay on one worker, so its module
# fixtures are made once (the session's small report is made by each worker that runs a file using
# it). TEST_JOBS=0 runs every test in this process, one after another.
TEST_JOBS ?= auto
test: setup
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

# The tests marked slow (an engine process per GPU a finding stands on: minutes), skipped by `make test`.
test-slow: setup
	WORKBENCH_SLOW=1 $(PY) -m pytest -q -m slow

# Every SGLang release learned from its own code (resumable: a release already learned from the same
# wheel by the same learner is skipped), the atlas's settings asked of each one's start-up checks,
# then each one's conformance (200 states a function, the
# newest 1,000), then one shipped file learned again byte for byte. Slow: see docs/conformance.md for its time.
releases: setup
	$(PY) -m workbench engines learn --all sglang --out data/engines
	$(PY) -m workbench engines learn-startup --engine sglang
	$(PY) -m workbench conformance --engine sglang --states 200 --summary
	$(PY) -m workbench conformance --engine sglang==0.5.23 --states 1000 --summary
	WORKBENCH_ENGINE_VERSIONS=1 $(PY) -m pytest -q -m engine_versions tests/test_learn_sglang.py
	WORKBENCH_ENGINE_VERSIONS=1 $(PY) -m pytest -q tests/test_conformance.py -k 0_5_10

# Every vLLM and vllm-ascend release learned from its own code into data/engines (resumable: a
# release learned from the same wheel by the same learner is skipped), then one learned again from
# scratch to show the file comes out byte for byte (tests/test_vllm_learned.py, marked).
vllm-releases: setup
	$(PY) -m workbench engines learn --all vllm --out data/engines
	$(PY) -m workbench engines learn --all vllm-ascend --out data/engines
	WORKBENCH_ENGINE_VERSIONS=1 $(PY) -m pytest -q -m engine_versions tests/test_vllm_learned.py
