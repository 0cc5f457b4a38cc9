# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ETL := $(BIN)/etl
STAMP := $(VENV)/.installed
EMULATOR_PORT ?= 8765
DEMO_SQL := select object_name, kind, count(*) as points, min(ts) as first, max(ts) as last from raw_named group by all order by 1, 2

.PHONY: run test lint emulator bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## make run: start the emulator, run configs/demo.yaml into output/demo, print the summary, stop.
run: $(STAMP)
	@$(ETL) emulator serve --port $(EMULATOR_PORT) --log-level warning & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null' EXIT; \
	$(ETL) emulator wait --url http://127.0.0.1:$(EMULATOR_PORT) --timeout 30 && \
	ETL_PASSWORD=demo $(ETL) run -c configs/demo.yaml --no-progress && \
	echo "Query it (DuckDB views raw, average, candles, raw_named, dimensions...):" && \
	echo "  $(ETL) query -c configs/demo.yaml \"$(DEMO_SQL)\"" && \
	$(ETL) query -c configs/demo.yaml "$(DEMO_SQL)"

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check etl tests $(wildcard benchmarks)

emulator: $(STAMP)
	$(ETL) emulator serve --port $(EMULATOR_PORT)

## make soak: the long crash and fault runs (many SIGKILLs at random moments).
soak: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) output/demo .pytest_cache
