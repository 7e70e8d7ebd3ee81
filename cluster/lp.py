"""A small dense simplex for the planner's max-min share problems (tens of rows), standard library only.

Responsible for: max c.x subject to A x <= b, x >= 0 with b >= 0 (the origin is feasible, so no phase one).
Bland's rule (lowest index enters and leaves) guarantees termination on the degenerate rows these problems have.
Not responsible for: building the problems (placement.py).
"""
from __future__ import annotations

EPS = 1e-12


def maximize(c: list[float], a: list[list[float]], b: list[float]) -> tuple[float, list[float]]:
    """Optimal value and x. Raises ValueError if b has a negative entry or the problem is unbounded."""
    m, n = len(a), len(c)
    if any(v < 0 for v in b):
        raise ValueError("maximize needs b >= 0 (origin feasible)")
    # Tableau rows: [A | I | b]; objective row: [-c | 0 | 0]. basis[i] = column basic in row i.
    rows = [list(map(float, a[i])) + [1.0 if j == i else 0.0 for j in range(m)] + [float(b[i])] for i in range(m)]
    obj = [-float(v) for v in c] + [0.0] * (m + 1)
    basis = list(range(n, n + m))
    while True:
        enter = next((j for j in range(n + m) if obj[j] < -EPS), None)
        if enter is None:
            break
        leave, best = None, None
        for i, row in enumerate(rows):
            if row[enter] > EPS:
                ratio = row[-1] / row[enter]
                if best is None or ratio < best - EPS or (abs(ratio - best) <= EPS and basis[i] < basis[leave]):
                    leave, best = i, ratio
        if leave is None:
            raise ValueError("unbounded")
        _pivot(rows, obj, leave, enter)
        basis[leave] = enter
    x = [0.0] * n
    for i, col in enumerate(basis):
        if col < n:
            x[col] = rows[i][-1]
    return obj[-1], x


def _pivot(rows: list[list[float]], obj: list[float], r: int, col: int) -> None:
    pivot_row = rows[r]
    p = pivot_row[col]
    for j in range(len(pivot_row)):
        pivot_row[j] /= p
    nz = [j for j, v in enumerate(pivot_row) if v != 0.0]   # rows are sparse: only these columns change
    for i, row in enumerate(rows):
        f = row[col]
        if i != r and f != 0.0:
            for j in nz:
                row[j] -= f * pivot_row[j]
    f = obj[col]
    if f != 0.0:
        for j in nz:
            obj[j] -= f * pivot_row[j]
