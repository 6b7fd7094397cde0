# One way to do the usual things. Every target installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install run test check lint bench clean constraints

install: $(VENV)/.installed

# The runtime dependencies at the versions in constraints.txt: what the image installs.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --constraint constraints.txt -e '.[test]'
	touch $@

## constraints: re-pin constraints.txt to the runtime dependencies installed in .venv
## (to move one: .venv/bin/pip install -U NAME, then make constraints)
constraints: install
	$(BIN)/python -m tests.pins > constraints.txt.new
	mv constraints.txt.new constraints.txt

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
