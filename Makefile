# accelport developer commands. `make demo` and `make test` work on a fresh
# machine with only Python 3.11: they create .venv and install what is needed.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The local CPU wheel of torch lives here on development and CI machines.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: setup demo test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(FIND_LINKS) -c constraints.txt -e '.[torch,profile,plots,kernels,pools,dev]'
	@touch $@

demo: setup
	$(BIN)/accelport demo

lint: setup
	$(BIN)/ruff check src tests benchmarks scripts

test: setup lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis accelport-demo
