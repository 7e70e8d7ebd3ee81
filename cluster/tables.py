"""Plain-text tables for describe() methods. No dependencies; columns are left-aligned, numbers right-aligned."""
from __future__ import annotations


def table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(_is_number(row[i]) for row in rows) and rows for i in range(len(header))]
    lines = []
    for r, row in enumerate(cells):
        parts = [c.rjust(w) if numeric[i] and r else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
        if r == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 0.01 and value else f"{value:,.2f}"
    return str(value)
