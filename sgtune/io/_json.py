"""Strict JSON for results: numpy → lists, no NaN/Infinity ever (``allow_nan=False``)."""
from __future__ import annotations

import dataclasses
import json
import math
from functools import singledispatch
from typing import Any

import numpy as np


@singledispatch
def to_json(obj: Any) -> Any:
    """Convert numpy scalars/arrays and dataclasses to JSON-native types."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


@to_json.register
def _(obj: np.ndarray) -> Any:
    return obj.tolist()


@to_json.register
def _(obj: np.generic) -> Any:
    return obj.item()


def _check_finite(obj: Any, path: str = "$") -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite number {obj} at {path}; encode it explicitly (e.g. a string)")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, f"{path}[{i}]")


def dumps(doc: Any) -> str:
    """Serialise with sorted keys; raise on any NaN/inf instead of writing invalid JSON."""
    text = json.dumps(doc, default=to_json, sort_keys=True, allow_nan=False, indent=1)
    return text
