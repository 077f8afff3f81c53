# The two set-up commands of the README: `make demo` and `make test`.
# Each creates the virtual environment it needs on first use.
PYTHON ?= python3
VENV   ?= .venv
EXTRAS ?= test   # CI adds crosscheck: EXTRAS=test,crosscheck
MARKERS ?= not slow and not slurm   # CI runs the slurm tests too: MARKERS="not slow"
PYTEST_ARGS ?=   # more of pytest's options, e.g. PYTEST_ARGS="-n 2" (pytest-xdist: the tests on 2 processes)
BIN     = $(VENV)/bin

.PHONY: demo test test-all bench clean

$(BIN)/rollsweep: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(strip $(EXTRAS))]"
	touch $@

demo: $(BIN)/rollsweep  ## run every study's demo sweeps and draw their figures into demo/
	$(BIN)/rollsweep demo --out demo

test: $(BIN)/rollsweep  ## the default test run (fast tests; slow and slurm tests excluded)
	$(BIN)/python -m pytest -p no:cacheprovider -m "$(strip $(MARKERS))" $(PYTEST_ARGS)

test-all: $(BIN)/rollsweep  ## every test, slow ones included
	$(BIN)/python -m pytest -p no:cacheprovider -m ""

bench: $(BIN)/rollsweep  ## every study against the baselines a user would write, one run each (run_all.py --quick: smoke test)
	$(BIN)/python -m pip install -q -e ".[bench]"
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo results
