"""Human-readable tables on stderr (results carry data; rendering lives here)."""
from __future__ import annotations

import numpy as np


def matrix_summary(name: str, a: np.ndarray, max_dim: int = 6) -> str:
    """A short block showing the top-left corner and the diagonal range of a matrix."""
    d = a.shape[0]
    k = min(d, max_dim)
    rows = [" ".join(f"{v:11.4g}" for v in a[i, :k]) + (" …" if d > k else "") for i in range(k)]
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
