"""The walk of a model object from ``verify_stationary_cov`` to the compiled chain, measured.

Every Python call inside ``sgtune/`` that receives the model object (as an argument or as ``self``) is a
*stop*; listed in call order, the walk *returns to a file* when a stop lies in a file that an earlier stop
left for another file, and *climbs a layer* when a stop lies in a higher layer (tests/test_layout.py's
LAYERS) than the stop before it. The compiled loop is reached when the engine's backend is called.

    python benchmarks/model_walk.py          # prints the stops and the three counts
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import sgtune
from sgtune.io.data import example
from sgtune.models import expand, get_model

PKG = Path(sgtune.__file__).parent
LAYERS = {"core": 0, "io": 1, "models": 2, "symbolic": 2, "diagnostics": 3, "theory": 3, "sampler": 4,
          "workflows": 5, "cli": 6}


def walk() -> list[tuple[str, str]]:
    from sgtune.core.config import Dynamics, RunSpec
    from sgtune.workflows.verify import verify_stationary_cov

    data = example("hetero-linear")
    model = get_model("linear")
    e = expand(model, data)
    stops: list[tuple[str, str]] = []

    def prof(frame, event, arg):  # type: ignore[no-untyped-def]
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if PKG not in path.parents:
            return
        code = frame.f_code
        args = [frame.f_locals.get(n) for n in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        if any(a is model for a in args):
            stops.append((str(path.relative_to(PKG)), code.co_name))

    sys.setprofile(prof)
    try:
        verify_stationary_cov(model, data, e, Dynamics(0.01, 32), RunSpec(200, n_chains=2, seed=0))
    finally:
        sys.setprofile(None)
    return stops


def counts(stops: list[tuple[str, str]]) -> dict[str, int]:
    files = [f for f, _ in stops]
    left: set[str] = set()
    returns = climbs = 0
    for prev, cur in zip(files, files[1:]):
        if cur != prev:
            left.add(prev)
            returns += cur in left
            climbs += LAYERS[Path(cur).parts[0]] > LAYERS[Path(prev).parts[0]]
    return {"stops": len(stops), "files": len(set(files)), "returns_to_a_file_left": returns,
            "climbs_up_a_layer": climbs}


if __name__ == "__main__":
    s = walk()
    for f, fn in s:
        print(f"{f}:{fn}")
    print(counts(s))
    np.set_printoptions()
