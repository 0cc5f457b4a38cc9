# Two commands do all the set-up on a fresh machine: `make run` (etl and the emulator: what the demo
# needs) and `make test` (and `make lint`: the test, lint and lake tools on top).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ETL := $(BIN)/etl
RUN_STAMP := $(VENV)/.run-installed
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=
FOREIGN_ARGS ?=
EMULATOR_PORT ?= 8765
DEMO_SQL := select object_name, kind, count(*) as points, min(ts) as first, max(ts) as last from raw_named group by all order by 1, 2
S3_PORT ?= 9000
SCHEDULER_PORT ?= 8786
# A demo's port: the one asked for when nothing listens there, else a free one (an emulator or S3 server
# left running must not answer in place of the demo's own). configs/demo*.yaml read ETL_DEMO_PORT.
free_port = $$($(BIN)/python -c "import socket as S; s, t = S.socket(), S.socket(); t.bind(('127.0.0.1', 0)); \
	print(t.getsockname()[1] if s.connect_ex(('127.0.0.1', $(1))) == 0 else $(1))")
WAIT_EMULATOR = $(ETL) emulator wait --url http://127.0.0.1:$$ETL_DEMO_PORT --timeout 30

.PHONY: run test test-fast test-cluster test-orchestrators lint emulator docs-config docs-output bench bench-capacity bench-fleet bench-tools bench-schedule bench-plan bench-verify soak clean demo-s3 demo-dask browser docs \
	postgres proxy demo-postgres bench-postgres

# The package's bytecode is compiled here, and again before a benchmark: where PYTHONDONTWRITEBYTECODE is
# set, every `etl` process would otherwise compile etl's modules anew at its start.
COMPILE = $(BIN)/python -m compileall -q etl etl_emulator

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[emulator]'
	$(COMPILE)
	touch $(RUN_STAMP)

# The dev extras (tests, lint, lake formats, Dask, S3, notebooks) over what `make run` installs.
$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# dlt (the peer the benchmark measures) resolves beside the dev extras, so it shares the venv.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	touch $(BENCH_STAMP)

## make run: start the emulator, run configs/demo.yaml into output/demo, print the summary, stop. It installs
## etl and the emulator only; make test and make lint add their tools.
run: $(RUN_STAMP)
	@export ETL_DEMO_PORT=$(call free_port,$(EMULATOR_PORT)); \
	$(ETL) emulator serve --port $$ETL_DEMO_PORT --log-level warning & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null' EXIT; \
	$(WAIT_EMULATOR) && \
	ETL_PASSWORD=demo $(ETL) run -c configs/demo.yaml --no-progress && \
	echo "Query it (DuckDB views raw, average, candles, raw_named, dimensions...):" && \
	echo "  $(ETL) query -c configs/demo.yaml \"$(DEMO_SQL)\"" && \
	$(ETL) query -c configs/demo.yaml "$(DEMO_SQL)"

# The HTML report (etl report -o) is tested in a real headless browser: Debian's Chromium, installed
# here when it is missing (as root, or through sudo).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "installing Debian's chromium for the HTML report's test"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	  --no-install-recommends chromium >/dev/null; }

# The Iceberg catalog's and the PostgreSQL sink's tests start a throwaway cluster of Debian's PostgreSQL
# (tests/support/postgres.py), as they start the S3 server; the package is installed here when it is missing
# (as root, or through sudo).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "installing Debian's postgresql for the PostgreSQL tests"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	  --no-install-recommends postgresql >/dev/null; }

# The proxy tests go through a real forward proxy: Debian's squid, started by the tests on a free loopback
# port with a config of their own (tests/support/proxy.py), not Debian's service; installed here when it is
# missing (as root, or through sudo).
proxy:
	@command -v squid >/dev/null 2>&1 || [ -x /usr/sbin/squid ] || { echo "installing Debian's squid for the proxy tests"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	  --no-install-recommends squid >/dev/null; }

# The tests run in TEST_WORKERS processes (pytest-xdist), a file's tests together: most of a test's time is
# a server and an etl process waiting on each other, so one process leaves a core idle.
TEST_WORKERS ?= 2
test: $(STAMP) browser postgres bench-tools proxy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

## make test-orchestrators: Airflow 3 runs docs/airflow/etl_dag.py (dag.test(), SQLite) against the emulator, from
## a venv of its own (.venv-airflow: Airflow's pins would fight the dev venv's); a few minutes. .ci/run calls it
## after make test.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
$(AIRFLOW_STAMP): tests/orchestrators/airflow-requirements.txt
	$(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tests/orchestrators/airflow-requirements.txt
	touch $(AIRFLOW_STAMP)

test-orchestrators: $(STAMP) $(AIRFLOW_STAMP)
	AIRFLOW_PYTHON=$(AIRFLOW_VENV)/bin/python $(BIN)/python -m pytest -q -m orchestrators tests/orchestrators

## make test-cluster: the Dask runs on workers of their own (started by the tests in mount namespaces of their
## own, a run stopped by SIGTERM and one by retry.run_deadline, a worker killed under Iceberg on S3 with its
## catalog in PostgreSQL); about a minute. .ci/run calls it after make test.
test-cluster: $(STAMP) postgres
	$(BIN)/python -m pytest -q -m slow tests/e2e/test_dask_budget.py

## make test-fast: only tests/unit (no server, no subprocess), well under a minute; make test runs all.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

## make lint: ruff (lint and format), mypy over the packages, and the import contracts (import-linter): the
## layers, the emulator apart, no import cycle.
lint: $(STAMP)
	$(BIN)/ruff check etl etl_emulator tests benchmarks tools
	$(BIN)/ruff format --check etl etl_emulator tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/lint-imports

## make docs-config: docs/config.md, the config reference, generated again from etl/config.py's models (a
## test fails when it is out of date).
docs-config: $(RUN_STAMP)
	$(BIN)/python -m tools.config_reference

## make docs-output: docs/output.md, the output reference, generated again from etl/model.py's schemas (a
## test fails when it is out of date).
docs-output: $(RUN_STAMP)
	$(BIN)/python -m tools.output_reference

## make docs: the documentation site from docs/ into site/ (mkdocs-material; a broken link fails the build).
docs: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## make demo-s3: the demo into a local S3 server (moto), then a DuckDB query over the bucket.
demo-s3: $(STAMP)
	@export ETL_DEMO_PORT=$(call free_port,$(EMULATOR_PORT)) s3=$(call free_port,$(S3_PORT)); \
	$(ETL) emulator serve --port $$ETL_DEMO_PORT --log-level warning & e=$$!; \
	$(BIN)/moto_server -H 127.0.0.1 -p $$s3 >/dev/null 2>&1 & m=$$!; \
	trap 'kill $$e $$m 2>/dev/null; wait $$e $$m 2>/dev/null' EXIT; \
	export AWS_ENDPOINT_URL=http://127.0.0.1:$$s3 AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo \
	       AWS_DEFAULT_REGION=us-east-1 ETL_PASSWORD=demo; \
	$(WAIT_EMULATOR) && \
	$(BIN)/python -c "import s3fs; s3fs.S3FileSystem().mkdir('demo-lake')" &&  \
	$(ETL) run -c configs/demo-s3.yaml --no-progress && \
	$(ETL) query -c configs/demo-s3.yaml "select kind, count(*) as points from raw group by kind order by kind"

## make demo-postgres: the demo into PostgreSQL tables (a throwaway cluster of Debian's PostgreSQL, started and
## removed here), then `etl query` over them and psql over the raw_named view.
demo-postgres: $(STAMP) postgres
	@export ETL_DEMO_PORT=$(call free_port,$(EMULATOR_PORT)); \
	$(ETL) emulator serve --port $$ETL_DEMO_PORT --log-level warning & e=$$!; \
	trap 'kill $$e 2>/dev/null; wait $$e 2>/dev/null' EXIT; \
	$(WAIT_EMULATOR) && ETL_PASSWORD=demo $(BIN)/python -m tests.support.postgres sh -c '\
	  $(ETL) run -c configs/demo-postgres.yaml --no-progress && \
	  $(ETL) query -c configs/demo-postgres.yaml "$(DEMO_SQL)" && \
	  PGPASSWORD=$$ETL_PG_PASSWORD $$(ls /usr/lib/postgresql/*/bin/psql | tail -1) -h 127.0.0.1 -p $$ETL_PG_PORT \
	    -U etl etl_catalog -c "select param_name, unit, count(*) as points, max(ts) as last from demo.raw_named \
	    group by 1, 2 order by 1 limit 8"'

## make demo-dask: a Dask scheduler and 2 worker processes on loopback run the demo (all slabs again).
demo-dask: $(STAMP)
	@export ETL_DEMO_PORT=$(call free_port,$(EMULATOR_PORT)) sp=$(call free_port,$(SCHEDULER_PORT)); \
	$(ETL) emulator serve --port $$ETL_DEMO_PORT --log-level warning & e=$$!; \
	$(BIN)/dask scheduler --host 127.0.0.1 --port $$sp --no-dashboard >$(VENV)/dask.log 2>&1 & s=$$!; \
	$(BIN)/dask worker tcp://127.0.0.1:$$sp --nworkers 2 --nthreads 1 --no-dashboard \
	  >>$(VENV)/dask.log 2>&1 & w=$$!; \
	trap 'kill $$e $$w $$s 2>/dev/null; wait $$e $$w $$s 2>/dev/null' EXIT; \
	$(WAIT_EMULATOR) && ETL_PASSWORD=demo $(ETL) run -c configs/demo.yaml --full-refresh --no-progress \
	  --executor dask --scheduler tcp://127.0.0.1:$$sp

## make bench-tools: the servers and client the benchmarks measure etl against, from Debian (as root, or
## through sudo): nginx with its echo module, and wrk. A benchmark skips what is missing, and says so.
bench-tools:
	@command -v nginx >/dev/null 2>&1 && [ -e /usr/lib/nginx/modules/ngx_http_echo_module.so ] && \
	  command -v wrk >/dev/null 2>&1 || { echo "installing Debian's nginx-light, its echo module and wrk"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	  --no-install-recommends nginx-light libnginx-mod-http-echo wrk >/dev/null || \
	  echo "could not install them: the benchmarks skip nginx and wrk"; }

## make bench: etl run next to the download ceiling, a naive script and dlt (benchmarks/run.py), then the
## small fleet (48 parameters x 7 days) against the emulator, the stdlib's ThreadingHTTPServer and nginx
## at 0/10/50 ms, next to the latency bound, wrk, bare httpx and the work floor (benchmarks/foreign.py).
## Then bench-capacity, and a year of checkpoints for 100,000 parameters loaded and planned (state.py).
## BENCH_ARGS="--repeat 5 --latency 0.05" for run.py, FOREIGN_ARGS for foreign.py; results in
## benchmarks/results/latest.json and foreign.json. docs/performance.md has the figures.
bench: $(BENCH_STAMP) bench-tools
	$(COMPILE)
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/foreign.py $(FOREIGN_ARGS)
	$(BIN)/python benchmarks/capacity.py $(CAPACITY_ARGS)
	$(BIN)/python benchmarks/state.py

## make bench-capacity: extract.concurrency auto beside a fixed 16 against servers of limited capacity (the
## emulator's --capacity, a ThreadingHTTPServer with a worker pool), then auto on Dask clusters of 1, 3 and 6
## workers and as 4 shards at once: share of the capacity, p95 time in the server, refusals, and the
## no-regression runs at 50 ms (benchmarks/capacity.py; about 25 minutes).
## CAPACITY_ARGS="--scenarios small large --contenders auto" (or "--scenarios cluster-large --workers 3"); results
## in benchmarks/results/capacity.json.
CAPACITY_ARGS ?=
bench-capacity: $(STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/capacity.py $(CAPACITY_ARGS)

## make bench-fleet: one-day runs over 800, 8,000 and 40,000 parameters next to bare httpx replaying the same
## requests, at 0/10/50 ms answers, and 1 vs 4 weeks of history at 2,000 parameters (benchmarks/fleet.py);
## then the same widths against nginx and the ThreadingHTTPServer at 50 ms, next to the latency bound, wrk
## and bare httpx (benchmarks/foreign.py). About 2 hours, most of it the 40,000-parameter runs at 50 ms.
FLEET_FOREIGN_ARGS ?= --params 800 8000 40000 --days 1 --period-range 10:900 --servers nginx threaded \
	--latencies 0.05 --repeat 1 --json benchmarks/results/foreign-fleet.json
bench-fleet: $(STAMP) bench-tools
	$(COMPILE)
	$(BIN)/python benchmarks/fleet.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/foreign.py $(FLEET_FOREIGN_ARGS)

## make bench-schedule: 200 hourly runs (after a first one-day run) into Parquet, Delta and Iceberg, no
## maintenance command: CPU and wall of the first and last 10 runs, files per day partition, bytes that
## are not data, peak RSS, exactness (docs/lake.md). Hours on 2 cores; BENCH_ARGS="--runs 40" for less.
bench-schedule: $(STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/schedule.py $(BENCH_ARGS)

## make bench-plan: what a run spends the server's capacity on, on the emulator and on servers/live.py: a
## first load's freshness run by run, a quiet fleet against its active part, late data's bytes by kind,
## an hourly run against the floor (benchmarks/plan.py; PLAN_ARGS="--scenarios floor --tree ../old" runs
## another checkout's etl). About 20 minutes on 2 cores; results in benchmarks/results/plan.json.
PLAN_ARGS ?=
bench-plan: $(STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/plan.py --json benchmarks/results/plan.json $(PLAN_ARGS)

## make bench-postgres: ADBC's bare COPY, etl's commit (DELETE, COPY, checkpoint in one transaction) and
## psycopg's COPY of the same Arrow batches, alternating; then etl run into PostgreSQL beside Parquet (wall,
## CPU, peak RSS). A throwaway cluster of Debian's PostgreSQL; results in benchmarks/results/postgres.json.
## `make bench-schedule BENCH_ARGS="--formats parquet postgres"` runs the 200 hourly runs into it.
bench-postgres: $(BENCH_STAMP) postgres
	$(COMPILE)
	$(BIN)/python benchmarks/postgres.py $(BENCH_ARGS)

## make bench-verify: what a nightly `etl verify --sample 0.01` costs over 8,000 parameters and a week of
## history (requests, seconds, peak RSS; benchmarks/verify.py). The export it verifies takes most of the time.
bench-verify: $(STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/verify.py $(BENCH_ARGS)

emulator: $(RUN_STAMP)
	$(ETL) emulator serve --port $(EMULATOR_PORT)

## make soak: the long crash and fault runs (many SIGKILLs at random moments).
soak: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) output/demo .pytest_cache site
