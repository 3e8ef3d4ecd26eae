"""Cost estimates measured on this machine: a small timing record next to the numba cache.

The sampler is compiled by numba once per model kind and machine (later runs load it from the cache). How long
that takes depends on the machine and the model (a logistic regression ≈ 20 s, a network several minutes on a
loaded 2-core VM), so the notice a first run prints quotes what this machine measured, not a constant: each run
that had to compile (its sampler took longer than ``COMPILE_NOTICE_AFTER`` to start) records the time under its
model's kind in ``sgtune_timings.json`` in the numba cache folder (``NUMBA_CACHE_DIR``, else
``~/.cache/sgtune``). A kind never measured is estimated from the slowest kind measured, and said so.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

#: how many measurements of a kind are kept (the estimate is their largest: a compile is not faster next time)
KEEP = 5


def timings_path() -> Path:
    """``sgtune_timings.json`` in ``NUMBA_CACHE_DIR`` (where the compiled sampler lives), else ``~/.cache/sgtune``."""
    folder = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "sgtune")
    return Path(folder) / "sgtune_timings.json"


def _load() -> dict[str, list[float]]:
    try:
        data = json.loads(timings_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): [float(x) for x in v if isinstance(x, (int, float))] for k, v in data.items()
            if isinstance(v, list)}


def record_compile(kind: str, seconds: float) -> None:
    """Add a measured first compile of ``kind`` (best effort: an unwritable cache folder records nothing)."""
    data = _load()
    data[kind] = (data.get(kind, []) + [round(float(seconds), 1)])[-KEEP:]
    path = timings_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def compile_estimate(kind: str) -> str:
    """How long a first compile of ``kind`` takes here, in words, from the record (or that it was never measured)."""
    data = _load()
    if data.get(kind):
        return f"~{max(data[kind]):.0f} s (measured on this machine for {kind})"
    every = [x for v in data.values() for x in v]
    if every:
        return (f"not measured yet for {kind}; the slowest model measured on this machine took {max(every):.0f} s, "
                "a network can take several times that")
    return "not measured on this machine yet: tens of seconds for a GLM, minutes for a network"
