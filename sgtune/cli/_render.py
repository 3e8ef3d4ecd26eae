"""Human-readable tables on stderr (results carry data; rendering lives here)."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..core.results import SummaryTable, short_label

#: the widest row label of a matrix block on stderr
ROW_LABEL = 24


def matrix_summary(name: str, a: np.ndarray, max_dim: int = 6, names: Sequence[str] | None = None) -> str:
    """A short block showing the top-left corner and the diagonal range of a matrix; with ``names`` (one per
    row, θ order) each row is labelled ``[i] name`` (long names shortened around an ellipsis) and each
    column ``[j]``."""
    d = a.shape[0]
    k = min(d, max_dim)
    labels = ([f"[{i}] {short_label(n, ROW_LABEL)}" for i, n in enumerate(names[:k])]
              if names is not None and len(names) == d else [])
    lw = max((len(x) for x in labels), default=0)
    pre = (lambda i: f"{labels[i]:<{lw}} ") if labels else (lambda i: "")
    rows = [pre(i) + " ".join(f"{v:11.4g}" for v in a[i, :k]) + (" …" if d > k else "") for i in range(k)]
    if labels:
        rows.insert(0, " " * (lw + 1) + " ".join(f"{f'[{j}]':>11}" for j in range(k)))
    diag = np.diag(a)
    head = f"{name} ({d}×{d}; diagonal in [{diag.min():.4g}, {diag.max():.4g}])"
    return "\n".join([head, *rows, "…" if d > k else ""]).rstrip()


def key_values(pairs: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in pairs)
    out = []
    for k, v in pairs:
        s = f"{v:.6g}" if isinstance(v, float) else str(v)
        out.append(f"{k:<{width}}  {s}")
    return "\n".join(out)


#: rows of the per-coordinate table on stderr (the first ones and the last few; the JSON has every coordinate)
TABLE_ROWS = 20


def coordinate_table(table: SummaryTable, max_rows: int = TABLE_ROWS) -> str:
    """The rows of a result's ``summary()`` (one per named coordinate), without its title, info and notes."""
    return replace(table, title="per coordinate", info=(), notes=()).as_text(max_rows)
