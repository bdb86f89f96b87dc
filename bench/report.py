"""Presentation only: a result table as aligned plain text, as JSON-ready data, and as a PNG
bar chart. The benchmarks build ``Table``s; nothing here measures anything."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeAlias

from matplotlib.figure import Figure

Cell: TypeAlias = str | int | float | None

#: Shown for a figure that was not measured (the notes say why).
MISSING: Final = "-"
#: Above this max/min ratio a chart uses a log scale (values span orders of magnitude).
LOG_SCALE_SPAN: Final = 50.0
#: Colour of the reference row's bars, so the bar the others are judged against stands out.
REFERENCE_COLOR: Final = "0.55"


@dataclass(frozen=True, slots=True)
class Column:
    """A column: its heading, how a number in it is written, and whether it is charted."""

    title: str
    fmt: str = "{:,.0f}"
    chart: bool = False


@dataclass(slots=True)
class Table:
    """One benchmark's results. The first column labels the rows (the subjects)."""

    name: str
    title: str
    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unit: str = ""
    #: Label of the row the others are compared with (drawn in grey).
    reference: str | None = None

    def to_json(self) -> dict[str, object]:
        """Raw values (not formatted), for ``results.json``."""
        titles = [column.title for column in self.columns]
        return {
            "title": self.title,
            "unit": self.unit,
            "columns": titles,
            "rows": [dict(zip(titles, row, strict=True)) for row in self.rows],
            "notes": self.notes,
        }


def _text(cell: Cell, column: Column) -> str:
    if cell is None:
        return MISSING
    if isinstance(cell, str):
        return cell
    return column.fmt.format(cell)


def format_table(table: Table) -> str:
    """The table as aligned text: labels left-aligned, numbers right-aligned, notes below."""
    cells = [
        [_text(cell, col) for cell, col in zip(row, table.columns, strict=True)]
        for row in table.rows
    ]
    headings = [column.title for column in table.columns]
    widths = [max(len(text) for text in column) for column in zip(headings, *cells, strict=True)]

    def line(texts: list[str]) -> str:
        first = texts[0].ljust(widths[0])
        rest = (text.rjust(width) for text, width in zip(texts[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * width for width in widths)
    out = [table.title, line(headings), rule, *(line(row) for row in cells)]
    out.extend(f"* {note}" for note in table.notes)
    return "\n".join(out) + "\n"


def write_chart(table: Table, path: Path) -> None:
    """A bar chart of the table's charted columns: with one such column, one bar per row
    (labelled with its value); with several, one group per column and one bar per row.
    Log scale when values span orders of magnitude; unmeasured cells are left out."""
    charted = [i for i, column in enumerate(table.columns) if column.chart]
    labels = [str(row[0]) for row in table.rows]
    values = [
        [float(v) if isinstance(v, int | float) else math.nan for v in (row[i] for i in charted)]
        for row in table.rows
    ]
    fig = Figure(figsize=(8.0, 4.8) if len(charted) == 1 else (11.0, 5.0))
    ax = fig.subplots()
    if len(charted) == 1:
        column = table.columns[charted[0]]
        bars = ax.bar(labels, [row[0] for row in values], color=_colors(labels, table.reference))
        ax.bar_label(bars, [_text(row[charted[0]], column) for row in table.rows], fontsize="small")
        ax.tick_params(axis="x", labelrotation=20)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
    else:
        width = 0.8 / max(1, len(labels))
        for r, (label, color) in enumerate(
            zip(labels, _colors(labels, table.reference), strict=True)
        ):
            xs = [c + (r - (len(labels) - 1) / 2) * width for c in range(len(charted))]
            ax.bar(xs, values[r], width=width, label=label, color=color)
        ax.set_xticks(range(len(charted)), [table.columns[i].title for i in charted])
        ax.legend(
            fontsize="small",
            ncols=min(len(labels), 4),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.08),
        )
    positive = [v for row in values for v in row if v > 0]
    if positive and max(positive) / min(positive) > LOG_SCALE_SPAN:
        ax.set_yscale("log")
    ax.set_ylabel(table.unit)
    ax.set_title(textwrap.fill(table.title, 90), fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _colors(labels: list[str], reference: str | None) -> list[str]:
    """Matplotlib's default cycle, one colour per row, and grey for the reference row."""
    palette = (f"C{i % 10}" for i in range(len(labels)))
    return [REFERENCE_COLOR if label == reference else next(palette) for label in labels]
