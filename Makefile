# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ETL := $(BIN)/etl
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=
EMULATOR_PORT ?= 8765

.PHONY: run test lint emulator bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# dlt (the peer the benchmark measures) resolves beside the dev extras, so it shares the venv.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	touch $(BENCH_STAMP)

## make run: start the emulator, run configs/demo.yaml into output/demo, print the summary, stop.
run: $(STAMP)
	@$(ETL) emulator serve --port $(EMULATOR_PORT) --log-level warning & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null' EXIT; \
	$(ETL) emulator wait --url http://127.0.0.1:$(EMULATOR_PORT) --timeout 30 && \
	ETL_PASSWORD=demo $(ETL) run -c configs/demo.yaml --no-progress && \
	echo "Query it: $(BIN)/python -c \"import duckdb; print(duckdb.sql(\\\"select kind, count(*) from read_parquet('output/demo/raw/**/*.parquet', hive_partitioning=1) group by 1\\\"))\""

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check etl tests $(wildcard benchmarks)

## make bench: etl run next to the download ceiling, a naive script and dlt (README, Performance).
## BENCH_ARGS="--repeat 5 --latency 0.05" to change the runs; results in benchmarks/results/latest.json.
bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

emulator: $(STAMP)
	$(ETL) emulator serve --port $(EMULATOR_PORT)

clean:
	rm -rf $(VENV) output/demo .pytest_cache
