"""The race behind "cannot commit to the Iceberg table etl.raw: Missing required files to delete", and
its fix (etl/sinks/lake/pyiceberg_compat.py, `overwrite`): replayed without threads, so it fails the same
way every time. When pyiceberg's own overwrite passes, the override can go."""

from __future__ import annotations

import pyarrow as pa

from etl.timeutil import to_ms


def test_an_overwrite_judges_each_manifest_by_its_own_partition_bounds(tmp_path):
    """pyiceberg's manifest evaluator keeps the manifest it evaluates on itself, and an overwrite calls
    one evaluator from several threads: a thread that resumes after another evaluated its manifest
    reads the other's bounds. Replayed here without threads: manifest A's bounds are read once, then B
    is evaluated by the same evaluator, then A's evaluation goes on."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan, LessThanOrEqual
    from pyiceberg.expressions.visitors import manifest_evaluator
    from pyiceberg.transforms import DayTransform

    from etl.sinks.lake.iceberg_commit import iso
    from etl.sinks.lake.pyiceberg_compat import overwrite, thread_safe

    catalog = load_catalog("t", type="sql", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    schema = pa.schema([("param_id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    txn = catalog.create_table_transaction(("n", "t"), schema=schema)
    with txn.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    txn.commit_transaction()
    table = catalog.load_table(("n", "t"))
    for day in (1, 5):
        stamp = pa.scalar(to_ms(f"2026-11-0{day}T12:00:00Z") * 1000, pa.timestamp("us", tz="UTC"))
        table.append(pa.table({"param_id": [1], "ts": pa.array([stamp.value], schema.field("ts").type)}))
    first, second = sorted(
        table.current_snapshot().manifests(table.io), key=lambda m: m.partitions[0].lower_bound
    )
    day = to_ms("2026-11-01T00:00:00Z") // 86_400_000
    where = And(GreaterThanOrEqual("ts_day", day), LessThanOrEqual("ts_day", day))

    class Interleaved(list):
        """A's bounds: the first read lets 'another thread' evaluate B."""

        def __init__(self, items, evaluate) -> None:
            super().__init__(items)
            self.evaluate, self.fired = evaluate, False

        def __getitem__(self, index):
            if not self.fired:
                self.fired = True
                self.evaluate(second)
            return super().__getitem__(index)

    class Manifest:
        def __init__(self, manifest, evaluate) -> None:
            self.partitions = Interleaved(manifest.partitions, evaluate)

    def interleaved(evaluate) -> bool:
        return evaluate(Manifest(first, evaluate))

    spec_, iceberg_schema = table.spec(), table.schema()
    shared = manifest_evaluator(spec_, iceberg_schema, where)
    assert shared(first) and not shared(second)  # alone, each is judged right
    assert not interleaved(shared)  # pyiceberg's: A judged by B's bounds, its files skipped
    assert interleaved(thread_safe(manifest_evaluator(spec_, iceberg_schema, where)))  # ours: A by A's

    # The same through the overwrites themselves: pyiceberg's public one, and ours
    on_ts = And(GreaterThanOrEqual("ts", iso(day * 86_400_000)), LessThan("ts", iso((day + 1) * 86_400_000)))

    def evaluator(producer):
        producer.delete_by_predicate(on_ts)
        return producer._build_manifest_evaluator(spec_.spec_id)

    assert not interleaved(evaluator(table.transaction().update_snapshot().overwrite()))
    assert interleaved(evaluator(overwrite(table.transaction(), table.io, {})))
