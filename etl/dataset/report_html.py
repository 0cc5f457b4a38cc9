"""`etl report -o FILE.html`: the report as one self-contained page.

Everything is inline (CSS, an SVG heatmap, a little script to sort and filter the tables), and a
Content-Security-Policy forbids the page any fetch: it opens the same offline, from a mail attachment
or a shared folder, years later.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from etl.dataset.report import HEATMAP_ROWS, Report, Row, label, percent
from etl.timeutil import duration_text, iso

# Completeness classes, worst first: (upper bound, css class, colour, legend text).
SCALE = [
    (0.0, "c0", "#7f1d1d", "0%"),
    (0.5, "c1", "#dc2626", "< 50%"),
    (0.8, "c2", "#f97316", "50-80%"),
    (0.9, "c3", "#facc15", "80-90%"),
    (0.95, "c4", "#a3e635", "90-95%"),
    (0.99, "c5", "#4ade80", "95-99%"),
    (1.01, "c6", "#15803d", ">= 99%"),
]
NONE_COLOUR = "#e5e7eb"


def css_class(completeness: float | None) -> str:
    if completeness is None:
        return "cn"
    if completeness <= 0:
        return "c0"
    return next(name for bound, name, _, _ in SCALE[1:] if completeness < bound)


def _style() -> str:
    cells = "\n".join(
        f"svg .{name} {{ fill: {colour}; }} .swatch.{name} {{ background: {colour}; }}"
        for _, name, colour, _ in SCALE
    )
    return f"""
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #111827; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }} h2 {{ font-size: 17px; margin: 28px 0 8px; }}
.muted {{ color: #6b7280; }}
.cards {{ display: flex; gap: 12px; flex-wrap: wrap; margin: 16px 0; }}
.card {{ border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; min-width: 120px; }}
.card b {{ display: block; font-size: 20px; }}
.card.bad b {{ color: #b91c1c; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: 4px 10px; border-bottom: 1px solid #e5e7eb; text-align: left; white-space: nowrap; }}
th {{ cursor: pointer; user-select: none; background: #f9fafb; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.legend {{ display: flex; gap: 10px; flex-wrap: wrap; margin: 6px 0 10px; font-size: 12px; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -2px;
          margin-right: 4px; }}
.swatch.cn {{ background: {NONE_COLOUR}; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #111827; }}
svg .cn {{ fill: {NONE_COLOUR}; }}
svg rect.cell:hover {{ stroke: #111827; stroke-width: 1.5; }}
{cells}
input#filter {{ padding: 4px 8px; margin-bottom: 8px; width: 260px; }}
dl {{ display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; }} dt {{ font-weight: 600; }}
"""


_SCRIPT = """
(function () {
  function key(cell) {  // numbers sort by their data-sort value, text as text
    var v = cell.getAttribute("data-sort");
    return v === null ? cell.textContent.trim().toLowerCase() : parseFloat(v);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, column) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var up = th.getAttribute("data-dir") !== "up";
        rows.sort(function (a, b) {
          var x = key(a.cells[column]), y = key(b.cells[column]);
          return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
        });
        rows.forEach(function (row) { body.appendChild(row); });
        th.setAttribute("data-dir", up ? "up" : "down");
      });
    });
  });
  var filter = document.getElementById("filter");
  if (filter) filter.addEventListener("input", function () {
    var text = filter.value.toLowerCase();
    document.querySelectorAll("#worst tbody tr").forEach(function (row) {
      row.style.display = row.textContent.toLowerCase().indexOf(text) >= 0 ? "" : "none";
    });
  });
  var rows = document.querySelectorAll("#heatmap g.row").length;
  document.documentElement.setAttribute("data-ready", String(rows));
})();
"""


def _heatmap(report: Report) -> str:
    rows = report.heatmap
    if not rows:
        return '<p class="muted">No parameter has a quality row in these days.</p>'
    days = report.days
    labels = [label(r) for r in rows]
    left = min(420, 16 + 7 * max(len(t) for t in labels))
    cell_w = max(12, min(40, 900 // max(len(days), 1)))
    cell_h, top = 18, 58
    width, height = left + cell_w * len(days) + 10, top + cell_h * len(rows) + 6
    every = max(1, -(-14 // cell_w))  # a day label every `every` columns: the ones that fit
    out = [
        f'<svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="completeness per parameter and day">'
    ]
    for j, day in enumerate(days):
        if j % every == 0:
            x, y = left + j * cell_w + cell_w / 2, top - 6
            out.append(
                f'<text class="day" x="{x}" y="{y}" transform="rotate(-50 {x} {y})">{escape(day[5:])}</text>'
            )
    for i, (row, text) in enumerate(zip(rows, labels, strict=True)):
        y = top + i * cell_h
        out.append(f'<g class="row" data-param="{int(row["param_id"])}">')
        out.append(f'<text class="label" x="{left - 8}" y="{y + 13}" text-anchor="end">{escape(text)}</text>')
        for j, cell in enumerate(row["daily"]):
            x = left + j * cell_w
            if cell is None:
                tip, cls = f"{text} {days[j]}: no row (nothing asked for that day)", "cn"
            else:
                value = cell["completeness"]
                cls = css_class(value)
                tip = (
                    f"{text} {days[j]}: {percent(value) or 'unknown'} complete, {cell['points']:,} of "
                    f"{cell['expected_points'] or 0:,} points, longest gap {duration_text(cell['longest_gap_seconds'])}"
                )
            out.append(
                f'<rect class="cell {cls}" data-date="{days[j]}" x="{x}" y="{y}" width="{cell_w - 1}" '
                f'height="{cell_h - 1}"><title>{escape(tip)}</title></rect>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _legend() -> str:
    items = [f'<span><i class="swatch {name}"></i>{escape(text)}</span>' for _, name, _, text in SCALE]
    items.append('<span><i class="swatch cn"></i>no row</span>')
    return f'<div class="legend">{"".join(items)}</div>'


def table(
    table_id: str,
    rows: list[Row],
    columns: list[tuple[str, Callable[[Row], object], Callable[[Row], object] | None]],
) -> str:
    """columns: (title, text of a row, sort key of a row or None)."""
    if not rows:
        return '<p class="muted">None.</p>'
    head = "".join(f"<th>{escape(title)}</th>" for title, _, _ in columns)
    body = []
    for row in rows:
        cells = []
        for _, text, sort in columns:
            value = text(row)
            numeric = sort is not None
            attr = f' data-sort="{escape(str(sort(row)))}"' if sort is not None else ""
            cells.append(f"<td{attr}{' class=num' if numeric else ''}>{escape(str(value))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def page(title: str, body: str) -> str:
    """A self-contained page: `body` (HTML) under the house style, with the tables' script; no fetch."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_style()}</style>
</head>
<body>
{body}<script>{_SCRIPT}</script>
</body>
</html>
"""


def card_list(cards: list[tuple[str, str, bool]]) -> str:
    """(name, value, bad) as the page's cards, the bad ones in red."""
    return "".join(
        f'<div class="card{" bad" if bad else ""}"><span class="muted">{escape(name)}</span>'
        f"<b>{escape(value)}</b></div>"
        for name, value, bad in cards
    )


def num(key: str, missing: float = -1.0) -> Callable[[Row], object]:
    return lambda r: missing if r.get(key) is None else r[key]


def render(report: Report) -> str:
    options = report.options
    window = f"{report.days[0]} .. {report.days[-1]}"
    cards = [
        (
            "completeness",
            percent(report.completeness) or "-",
            report.completeness is not None
            and options.fail_under is not None
            and report.completeness < options.fail_under,
        ),
        ("parameters", f"{report.parameters:,}", False),
        ("points", f"{report.points:,} of {report.expected_points:,}", False),
        ("stale", f"{report.stale_count:,}", report.stale_count > 0),
        ("flatlines", f"{report.flatline_count:,}", report.flatline_count > 0),
        ("late points", f"{report.late_points:,}", False),
    ]
    if options.fail_under is not None:
        cards.append(
            (f"below {percent(options.fail_under)}", f"{report.below_count:,}", report.below_count > 0)
        )
    verified = ""
    if report.verify is not None:
        cards.append(
            ("last verify", report.verify["status"], report.verify["status"] in ("differs", "failed"))
        )
        verified = (
            f'<p class="muted">Last <code>etl verify</code> ({escape(str(report.verify["finished"]))}): '
            f"{escape(report.verify['verdict'])}</p>"
        )
    card_html = card_list(cards)
    parameter = ("parameter", label, None)
    ident = ("id", lambda r: r["param_id"], num("param_id"))
    worst = table(
        "worst",
        report.worst,
        [
            parameter,
            ident,
            ("kind", lambda r: r["kind"] or "", None),
            ("complete", lambda r: percent(r["completeness"]), num("completeness")),
            ("points", lambda r: f"{r['points']:,}", num("points")),
            ("expected", lambda r: f"{r['expected_points'] or 0:,}", num("expected_points")),
            ("longest gap", lambda r: duration_text(r["longest_gap_seconds"]), num("longest_gap_seconds")),
            ("period", lambda r: duration_text(r["period_seconds"]), num("period_seconds")),
            ("last point", lambda r: r["last_ts"] or "", None),
        ],
    )
    stale = table(
        "stale",
        report.stale,
        [
            parameter,
            ident,
            (
                "silent for",
                lambda r: duration_text(r["silent_seconds"]) or "the whole span",
                num("silent_seconds", 1e18),
            ),
            ("last point", lambda r: r["last_ts"] or "none in these days", None),
        ],
    )
    flat = table(
        "flatlines",
        report.flatlines,
        [
            parameter,
            ident,
            ("date", lambda r: r["date"], None),
            ("one value for", lambda r: duration_text(r["flatline_seconds"]), num("flatline_seconds")),
            ("points that day", lambda r: f"{r['points']:,}", num("points")),
        ],
    )
    late = table(
        "late",
        report.late,
        [
            parameter,
            ident,
            ("late points", lambda r: f"{r['late_points']:,}", num("late_points")),
            ("days", lambda r: r["late_days"], num("late_days")),
            ("the latest at least", lambda r: duration_text(r["late_seconds"]), num("late_seconds")),
        ],
    )
    shown = len(report.heatmap)
    more = f" (the {shown} least complete of {report.parameters:,})" if report.parameters > shown else ""
    return page(
        f"Data quality: {report.source}, {window}",
        f"""<h1>Data quality of {escape(report.source)}</h1>
<div class="muted">raw series, {escape(window)} ({len(report.days)} UTC day{"s" if len(report.days) > 1 else ""}),
report end {escape(iso(report.end))}, generated {escape(iso(report.generated))}</div>
<div class="cards">{card_html}</div>
{verified}

<h2>Completeness per parameter and day{escape(more)}</h2>
{_legend()}
{_heatmap(report)}

<h2>Least complete parameters</h2>
<input id="filter" type="search" placeholder="filter by object, parameter, unit, id">
{worst}

<h2>Stale parameters ({report.stale_count:,})</h2>
<p class="muted">No point in the {escape(duration_text(options.stale_after / 1000))} before the report's end.</p>
{stale}

<h2>Late parameters ({report.late_count:,})</h2>
<p class="muted">Points that reached the platform after a run had read past their stamps (fetched by a later
run), the latest first.</p>
{late}

<h2>Flatlines ({report.flatline_count:,})</h2>
<p class="muted">One value for {escape(duration_text(options.flatline_after / 1000))} or more in a day
(signal parameters, which hold a value by nature, are left out).</p>
{flat}

<h2>What the figures mean</h2>
<dl>
<dt>complete</dt><dd>points / expected points, at most 100%</dd>
<dt>expected points</dt><dd>the part of the day covered / the parameter's period</dd>
<dt>period</dt><dd>the median spacing of a day's points, refined by the mean of the spacings near it</dd>
<dt>longest gap</dt><dd>the longest time without a point in a day, its edges included</dd>
<dt>flatline</dt><dd>the longest run of consecutive points with one value</dd>
<dt>late</dt><dd>at least the time from a point's stamp to the end of the last run that read past it
without it</dd>
</dl>
<p class="muted">Heatmap rows: at most {HEATMAP_ROWS}; tables: the {options.top} first. Everything is in the
<code>quality</code> view of <code>etl query</code>.</p>
""",
    )
