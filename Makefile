# make demo: heat1d and life on the local devices, netCDF + plots + comparison table
# make test: the whole test suite (what CI runs)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench docs clean

# pgas needs Python 3.11+ (jax 0.10 has no wheels for 3.10): stop before making .venv.
$(BIN)/python:
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "pgas needs Python 3.11 or newer, but PY=$(PY) is Python $$($(PY) -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo '(not found)'); run make PY=python3.11 (or newer)" >&2; \
		exit 1; }
	$(PY) -m venv $(VENV)

# pip compiles every module at install: where PYTHONDONTWRITEBYTECODE is set (as on our
# development machines) a run cannot cache what it compiles, and `pip install --no-compile`
# made the suite 25% slower there (every process compiled what it imported: import pgas 2.3 s)
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# The demo runs on 4 virtual CPU devices on every machine, GPU or not (the table compares
# them with mpiexec -n 4); on a GPU: make demo DEMO_PLATFORM=gpu DEMO_DEVICES=1
DEMO_PLATFORM ?= cpu
DEMO_DEVICES ?= 4
DEMO := --platform $(DEMO_PLATFORM) --devices $(DEMO_DEVICES)

demo: $(STAMP)
	mkdir -p out
	$(BIN)/python examples/heat1d/heat1d.py $(DEMO) --n 1001 --init gaussian --steps 10000 \
		--out out/heat1d.nc --plot out/heat1d.png --compare --overwrite
	$(BIN)/python examples/life/life.py $(DEMO) --size 256x256 --pattern random --density 0.3 \
		--steps 500 --out out/life.nc --plot out/life.gif --plot out/life.png --compare --overwrite

# Two pytest-xdist workers: the in-process tests beside the ones that launch processes
# (conftest.py keeps those on one worker, one at a time)
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check pgas tests examples benchmarks
	$(BIN)/ruff format --check pgas tests examples benchmarks

# The API reference, from the docstrings, in docs/_build/html (warnings are errors)
docs: $(STAMP)
	$(BIN)/python -m sphinx -b html -W --keep-going -q docs docs/_build/html
	@echo "open docs/_build/html/index.html"

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) out .pytest_cache docs/_build
