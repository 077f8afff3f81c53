# The two set-up commands of the README: `make demo` and `make test`.
# Each creates the virtual environment it needs on first use.
PYTHON ?= python3
VENV   ?= .venv
EXTRAS ?= test   # CI adds crosscheck: EXTRAS=test,crosscheck
MARKERS ?= not slow and not slurm   # CI runs the slurm tests too: MARKERS="not slow"
PYTEST_ARGS ?=   # more of pytest's options, e.g. PYTEST_ARGS="-k hoop"
# The tests on every core, up to 8 (pytest-xdist's workers; 0: in pytest's own
# process, where a machine has one core). On 2 cores that halves the suite's
# time; each worker holds its programs and solves (about 1 GiB), so 8 at most.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n > 8 ? 8 : (n > 1 ? n : 0) )))
BIN     = $(VENV)/bin

.PHONY: demo test test-all bench clean

# pip -q prints errors and warnings only. setuptools (>= 70) adds to every
# editable install a boxed "Editable installation" notice (about folders named
# like a package); it is the one warning ignored, by its message: any other
# warning, and every error, still shows.
PIP_INSTALL = PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q

$(BIN)/rollsweep: pyproject.toml
	@echo "Setting up $(VENV): rollsweep, its dependencies and the '$(strip $(EXTRAS))' extras (a few minutes the first time)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP_INSTALL) --upgrade pip
	@$(PIP_INSTALL) -e ".[$(strip $(EXTRAS))]"
	@touch $@
	@echo "Set up: $(BIN)/rollsweep"

demo: $(BIN)/rollsweep  ## run every study's demo sweeps and draw their figures into demo/
	$(BIN)/rollsweep demo --out demo

# --dist loadfile: a file's tests go to one worker (which reuses the programs and
# solves its tests share; the real-SLURM tests' cluster is started once);
# --durations: the 30 slowest.
test: $(BIN)/rollsweep  ## the default test run (fast tests; slow and slurm tests excluded), on every core
	$(BIN)/python -m pytest -p no:cacheprovider -m "$(strip $(MARKERS))" -n $(strip $(TEST_WORKERS)) \
		--dist loadfile --durations=30 $(PYTEST_ARGS)

test-all: $(BIN)/rollsweep  ## every test, slow ones included
	$(BIN)/python -m pytest -p no:cacheprovider -m "" -n $(strip $(TEST_WORKERS)) --dist loadfile --durations=30

bench: $(BIN)/rollsweep  ## every study against the baselines a user would write, one run each (run_all.py --quick: smoke test)
	@$(PIP_INSTALL) -e ".[bench]"
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo results
