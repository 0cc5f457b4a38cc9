"""What analysts call a parameter: its object's name, its own name and its unit, from the dimension
tables of the config's source (ids collide across sources, so names are looked up within one)."""

from __future__ import annotations

from dataclasses import dataclass

from etl.config import Config
from etl.dataset.query import connect


@dataclass(frozen=True)
class Names:
    param_id: int
    object_id: int | None = None
    object_name: str | None = None
    param_name: str | None = None
    unit: str | None = None

    def title(self) -> str:
        """'obj-1 / temperature-1001 [°C]', or what is known of it."""
        obj = self.object_name or (f"object {self.object_id}" if self.object_id is not None else None)
        text = " / ".join(t for t in (obj, self.param_name or f"param {self.param_id}") if t)
        return text + (f" [{self.unit}]" if self.unit else "")


def lookup(config: Config, param_id: int) -> Names:
    """The names of a parameter; the ids alone when the dimension tables are missing (dimensions: false)."""
    con = connect(config)
    present = {r[0] for r in con.sql("select view_name from duckdb_views() where not internal").fetchall()}
    if "parameters" not in present:
        return Names(param_id)
    columns = con.sql("select * from parameters limit 0").columns
    unit = "p.unit" if "unit" in columns else "null"
    objects = "objects" in present
    source = config.source.name  # letters, digits, '.', '_' and '-' (the config says so)
    rows = con.sql(
        f"select p.object_id, {'o.shortname' if objects else 'null'}, p.name, {unit} from parameters p "
        + ("left join objects o on o.id = p.object_id and o.source = p.source " if objects else "")
        + f"where p.id = {int(param_id)} and p.source = '{source}' limit 1"
    ).fetchall()
    if not rows:
        return Names(param_id)
    object_id, object_name, name, unit_text = rows[0]
    return Names(param_id, object_id, object_name, name, unit_text or None)
