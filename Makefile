# cacheaudit: `make demo` and `make test` are the two commands a new user needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
MITM_VENV := .venv-mitm
MITM_STAMP := $(MITM_VENV)/.installed
WAREHOUSE ?= warehouse
REPORTS ?= reports/out

.PHONY: demo test lint typecheck unit bench docs clean help chromium java mitm demo-screenshot install

help:
	@echo "make demo   - install, generate demo traffic, ingest it, print headline numbers and the report path"
	@echo "make test   - the whole suite: ruff, mypy, pytest"
	@echo "make bench  - benchmarks (ingest throughput, view build time); see bench/"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# setuptools 77+ reads the SPDX license string; the wheel test builds offline with it
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

# pyspark (a 300 MB download) only for the Spark engine's tests: `make demo` does without it
$(SPARK_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,spark]"
	@touch $(SPARK_STAMP)

install: $(STAMP)

# the ISO week with the most requests (the latest on a tie): the demo's last week has one day only
BUSIEST_WEEK_SQL := select strftime(week, '%G-W%V') as week from report_weekly_headline order by requests desc, week desc limit 1

BUSIEST_WEEK = $$($(BIN)/cacheaudit sql --warehouse $(WAREHOUSE) --format csv "$(BUSIEST_WEEK_SQL)" | sed -n 2p)

demo: $(STAMP)
	$(BIN)/cacheaudit demo --out demo/capture.jsonl
	$(BIN)/cacheaudit ingest demo/capture.jsonl --warehouse $(WAREHOUSE)
	$(BIN)/cacheaudit build --warehouse $(WAREHOUSE)
	$(BIN)/cacheaudit summary --warehouse $(WAREHOUSE)
	$(BIN)/cacheaudit report weekly --all --warehouse $(WAREHOUSE) --out $(REPORTS) > /dev/null
	@week=$(BUSIEST_WEEK); \
	test -n "$$week" || { echo "no week with requests in $(WAREHOUSE)" >&2; exit 1; }; \
	echo "weekly report of $$week, the demo week with the most requests (opens offline in any browser; index.html lists every week):"; \
	$(BIN)/cacheaudit report weekly --week "$$week" --warehouse $(WAREHOUSE) --out $(REPORTS) 2>/dev/null

# Debian's Chromium for the browser test of the reports (CI runs as root on Debian).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium could not be installed: browser tests will skip"

# Java for the Spark conformance test (pyspark needs a JVM); it skips with the reason without one.
java:
	@command -v java >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null) || echo "java could not be installed: Spark tests will skip"

# mitmproxy in its own environment for the addon's end-to-end test: on Python 3.11 pip can only
# get mitmproxy 11, which pins h11 0.14 and would break httpx in .venv. The test skips without it.
$(MITM_STAMP):
	@($(PYTHON) -m venv $(MITM_VENV) && $(MITM_VENV)/bin/python -m pip install --quiet mitmproxy orjson xxhash zstandard && touch $(MITM_STAMP)) || echo "mitmproxy could not be installed: the mitmdump test will skip"

mitm: $(MITM_STAMP)

demo-screenshot: demo chromium
	$(BIN)/python -m pipeline.reports.browser "$$($(BIN)/cacheaudit report weekly --week $(BUSIEST_WEEK) --warehouse $(WAREHOUSE) --out $(REPORTS) 2>/dev/null)" reports/demo-weekly.png

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests bench
	$(BIN)/ruff format --check pipeline tests bench

typecheck: $(STAMP)
	$(BIN)/mypy pipeline

unit: $(SPARK_STAMP) chromium java mitm
	$(BIN)/pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(WAREHOUSE) demo reports/out .pytest_cache .mypy_cache .ruff_cache

docs: $(STAMP)
	$(BIN)/python -m pipeline.dialects.mapping > docs/dialects.md
	$(BIN)/python -m pipeline.docs
