"""What tests share, by topic. Test files import from here, never from one another.

- emulator.py   the test emulator's settings (emulator_config), the test window (START, END, T0, NOW),
                what its request log says (series_requests)
- configs.py    configs pointing at an emulator (config_dict, make_config, write_config), S3_ENV
- expected.py   what the datasets must hold, recomputed from the emulator's generator (expected_table,
                day_facts)
- output.py     what an output holds, read as analysts read it (read, read_quality, checkpoints,
                data_files)
- checks.py     assertions over an output (assert_exact, assert_output_matches_state)
- pipeline.py   run(config, ...): a pipeline run in this process
- cli.py        etl(*args, ...) and etl_process(*args, ...): the CLI in a child process; etl_main(capsys,
                *args): the CLI's entry point in this process; sign_in_env, connection_env
- client.py     the client against an emulator (client_for, FAST retries)
- credentials.py  a login with an awkward password (PASSWORD, USERS, etl_user_config), leaks()
- postgres.py   a throwaway PostgreSQL cluster (running_postgres) for the Iceberg SQL catalog
- turns.py      tasks of one event loop brought to a state by turns of the loop, not the clock
                (until, settle)

The fixtures that start servers stay in tests/e2e/conftest.py; nothing here starts one on import.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: pyproject.toml, docs/, benchmarks/
