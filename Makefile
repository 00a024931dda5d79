# Every target installs what it needs, so each one works as the first command on a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
# uv comes from PyPI through pip when it is missing; `python -m uv` works without a PATH entry.
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export UV_PYTHON_DOWNLOADS := never

.PHONY: help install demo test check fmt bench stress clean

help:  ## List the targets.
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml uv.lock packages/pollux/pyproject.toml packages/pollard/pyproject.toml
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	$(UV) sync --locked --all-packages --python $(PYTHON)
	@touch $(STAMP)

install: $(STAMP)  ## Create .venv with both packages editable and the dev tools.

demo: $(STAMP)  ## Run the main job offline (no keys, no network), in Python and with the pollux command.
	$(BIN)/python examples/quickstart.py
	@echo
	$(BIN)/python examples/cli_fanout.py

# The suite spreads over the machine's cores, at most four (its PostgreSQL, Redis and subprocess
# tests share one server each); `make test TEST_JOBS=0` runs it in one process.
TEST_JOBS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0))))")

test: $(STAMP)  ## Run the whole test suite.
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS)

check: $(STAMP)  ## Formatting, lint and strict typing over both packages, bench/ and stress/.
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy --strict packages/pollux/src packages/pollard/src bench stress

fmt: $(STAMP)  ## Format and auto-fix.
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# (its own .PHONY line, so this target merges cleanly beside others)
.PHONY: docs
docs: $(STAMP)  ## Build the documentation site strictly into site/ (offline).
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: $(STAMP)  ## Run the benchmarks; prints a table and writes bench/results/latest.json.
	$(BIN)/python -m bench $(BENCH_ARGS)

# (its own .PHONY line, so this target merges cleanly beside others)
.PHONY: screenshots
screenshots: $(STAMP)  ## Regenerate the run-view screenshots of docs/pollard/observability.md (Chromium).
	$(BIN)/python docs/pollard/screenshots.py

stress: $(STAMP)  ## Bounded stress campaigns (faults, SIGKILL, contention, garbage, secrets); a table.
	$(BIN)/python -m stress $(STRESS_ARGS)

clean:  ## Remove the virtual environment and caches.
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis site

# (its own .PHONY line, so this target merges cleanly beside others)
.PHONY: try-wheels
TRY := /tmp/pollux-try-wheels
try-wheels: $(STAMP)  ## Build the wheels, install them in a fresh venv under /tmp, run the README's shell quick start.
	rm -rf $(TRY) && mkdir -p $(TRY)/work
	$(UV) build --all-packages -o $(TRY)/dist
	$(PYTHON) -m venv $(TRY)/venv
	$(TRY)/venv/bin/pip install --quiet --disable-pip-version-check \
	    "$$(ls $(TRY)/dist/pollux_ai-*.whl)[cli]" $(TRY)/dist/pollard-*.whl
	cp examples/data/* $(TRY)/work/
	cd $(TRY)/work && PATH=$(TRY)/venv/bin:$$PATH && \
	    pollux many questions.txt --source dioscuri.txt --mock \
	        --ledger runs.db --max-calls 10 --max-usd 0.01 --out answers.jsonl && \
	    pollard report runs.db "pollux many questions.txt" && \
	    pollux many questions.txt --source dioscuri.txt --mock --ledger runs.db --replay \
	        --out replayed.jsonl && \
	    cmp answers.jsonl replayed.jsonl && echo "try-wheels: the quick start ran from the wheels"
