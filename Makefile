# One way to do the usual things. Every target installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install run test check lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

## run: install and run the sink (SMTP 127.0.0.1:1025, HTTP 127.0.0.1:8025, SQLite ./runsink.db)
run: install
	$(BIN)/runsink serve

## test: install, then lint, type-check and run the whole test suite
test: install lint
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check sink api tests bench
	$(BIN)/mypy

## check: everything CI checks, plus the formatter
check: test
	$(BIN)/ruff format --check sink api tests bench

## bench: every benchmark in bench/, each against its peer in the same run -> bench/RESULTS.md
bench: install
	$(BIN)/python bench/all.py

clean:
	rm -rf $(VENV) *.egg-info build
