"""Index blocks of the ``block`` step-size family, read from a JSON file or given as lists."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core._refs import cites
from ..core.errors import DataFormatError, ShapeError

__all__ = ["load_blocks"]


@cites("sgtune", "block-diagonal step-size family (per-layer learning-rate matrices)")
def load_blocks(blocks: Any, dim: int) -> tuple[np.ndarray, ...]:
    """Index blocks of the ``block`` family from a JSON file path or a list of lists of indices.

    The file holds a list of lists of 0-based parameter indices, e.g. ``[[0, 1, 2], [3, 4]]``
    (or ``{"blocks": [...]}``); together they must cover 0..D−1, each index exactly once.

    Parameters
    ----------
    blocks : str, path or list of list of int
        A JSON file (``--blocks FILE``) or the blocks themselves.
    dim : int
        D, the number of parameters the blocks partition.

    Returns
    -------
    tuple of ndarray
        One array of indices per block.

    Raises
    ------
    DataFormatError
        An unreadable file, invalid JSON, or blocks that do not partition 0..D−1 (the message
        names the first missing or repeated index).

    See Also
    --------
    sgtune.theory.tuning.tune : Its ``block`` family uses them.

    Examples
    --------
    >>> from sgtune.io.blocks import load_blocks
    >>> load_blocks([[0, 1], [2]], 3)
    (array([0, 1]), array([2]))
    """
    source = "blocks"
    if isinstance(blocks, (str, bytes)) or hasattr(blocks, "__fspath__"):
        import json
        import os

        source = os.fspath(blocks)  # type: ignore[arg-type]
        try:
            with open(source, encoding="utf-8") as fh:
                blocks = json.load(fh)
        except OSError as exc:
            raise DataFormatError(f"`blocks={source}`: cannot read the file ({exc.strerror})") from None
        except ValueError as exc:
            raise DataFormatError(f"`blocks={source}`: not valid JSON ({exc}); expected a list of lists of "
                                  "parameter indices such as [[0, 1], [2, 3, 4]]") from None
    if isinstance(blocks, dict) and "blocks" in blocks:
        blocks = blocks["blocks"]
    if isinstance(blocks, (list, tuple)):
        blocks = [b.tolist() if isinstance(b, np.ndarray) else b for b in blocks]
    if not isinstance(blocks, (list, tuple)) or not blocks or not all(isinstance(b, (list, tuple)) and b
                                                                       for b in blocks):
        raise DataFormatError(f"{source}: must be a non-empty list of non-empty lists of parameter "
                              f"indices such as [[0, 1], [2, 3, 4]], got {str(blocks)[:60]}")
    out = []
    for b in blocks:
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in b):
            raise DataFormatError(f"{source}: block {list(b)[:10]} holds a non-integer index; use 0-based integers")
        out.append(np.asarray(b, dtype=int))
    flat = np.concatenate(out)
    if flat.min() < 0 or flat.max() >= dim:
        bad = int(flat[(flat < 0) | (flat >= dim)][0])
        raise ShapeError(f"{source}: parameter index {bad} is out of range 0..{dim - 1} (D = {dim})")
    counts = np.bincount(flat, minlength=dim)
    if np.any(counts != 1):
        i = int(np.argmax(counts != 1))
        what = "is missing" if counts[i] == 0 else f"appears {counts[i]} times"
        raise DataFormatError(f"{source}: parameter index {i} {what}; the blocks must cover 0..{dim - 1} "
                              "with each index exactly once")
    return tuple(out)
