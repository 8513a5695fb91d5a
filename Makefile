# Two entry points: `make demo` (set up, then run the demo on embedded defaults) and
# `make test` (set up, then run the test suite). Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-slow lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The local CPU wheel of torch first: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/semray demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The minutes-long acceptance tests (spilling, SIGKILL and resume, cascades and set-level operators
# end to end); CI runs them after `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check semray tests benchmarks
	$(BIN)/mypy semray

clean:
	rm -rf $(VENV) .semray
