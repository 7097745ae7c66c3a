# cacheaudit: `make demo` and `make test` are the two commands a new user needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WAREHOUSE ?= warehouse

.PHONY: demo test lint typecheck unit bench docs clean help

help:
	@echo "make demo   - install, generate demo traffic, ingest it, print headline numbers and the report path"
	@echo "make test   - the whole suite: ruff, mypy, pytest"
	@echo "make bench  - benchmarks (ingest throughput, view build time); see bench/"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/cacheaudit demo --out demo/capture.jsonl
	$(BIN)/cacheaudit ingest demo/capture.jsonl --warehouse $(WAREHOUSE)
	$(BIN)/cacheaudit summary --warehouse $(WAREHOUSE)

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests bench
	$(BIN)/ruff format --check pipeline tests bench

typecheck: $(STAMP)
	$(BIN)/mypy pipeline

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(WAREHOUSE) demo reports/out .pytest_cache .mypy_cache .ruff_cache

docs: $(STAMP)
	$(BIN)/python -m pipeline.dialects.mapping > docs/dialects.md
	$(BIN)/python -m pipeline.docs
