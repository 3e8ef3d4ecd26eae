"""``sgtune plan --plot``: the planned cost against the batch size, one line per family (matplotlib extra).

Two panels share the batch-size axis (log₂): gradient evaluations C·B·(burn-in + T) and predicted wall
seconds. Feasible candidates are filled markers joined per (family, momentum, batching, β) series,
infeasible ones are absent; the Pareto front (no other candidate is at least as cheap in both gradients
and seconds) is circled, the recommended candidate is a star. Built without pyplot (see
:mod:`sgtune.io.plots`).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from .plots import require_matplotlib

__all__ = ["figure_plan"]


def figure_plan(rows: Sequence[dict[str, Any]], *, recommended: int | None, front: Sequence[int] = (),
                title: str = "") -> Any:
    """Build the plan figure from the candidates' JSON rows (``Candidate.to_dict()``).

    Parameters
    ----------
    rows : sequence of dict
        The candidates' JSON rows (``batch_size``, ``family``, ``momentum``, ``batching``,
        ``inverse_temperature``, ``feasible``, ``gradient_evaluations``, ``predicted_seconds``).
    recommended : int or None
        The index of the recommended row (a star), or None.
    front : sequence of int, optional
        The indices of the Pareto front (circled).
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels (gradient evaluations, predicted seconds) over the batch size.

    Raises
    ------
    MissingExtraError
        If matplotlib is not installed.

    Examples
    --------
    >>> rows = [{"batch_size": b, "family": "dense", "momentum": 0.0, "batching": "replacement",
    ...          "inverse_temperature": "inf", "feasible": True, "gradient_evaluations": g,
    ...          "predicted_seconds": g / 1e6} for b, g in [(16, 4e5), (64, 3e5)]]
    >>> fig = figure_plan(rows, recommended=1, front=[1])
    >>> len(fig.axes), fig.axes[0].get_xscale()
    (2, 'log')
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 4.4), layout="constrained", dpi=110)
    axes = fig.subplots(1, 2, sharex=True)
    series: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        label = r["family"]
        if r["momentum"]:
            label += f", κ = {r['momentum']:g}"
        if r["batching"] != "replacement":
            label += f", {r['batching']}"
        if r["inverse_temperature"] != "inf":
            label += f", β = {r['inverse_temperature']:g}"
        series.setdefault(label, []).append(i)
    for ax, key, name in ((axes[0], "gradient_evaluations", "gradient evaluations C·B·(burn-in + T)"),
                          (axes[1], "predicted_seconds", "predicted wall seconds (this machine)")):
        for label, idx in series.items():
            pts = [(rows[i]["batch_size"], rows[i][key]) for i in idx if rows[i]["feasible"]
                   and isinstance(rows[i][key], (int, float)) and math.isfinite(rows[i][key])]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, marker="o", label=label)
        for i in front:
            v = rows[i][key]
            if isinstance(v, (int, float)) and math.isfinite(v):
                ax.plot([rows[i]["batch_size"]], [v], marker="o", markersize=13, markerfacecolor="none",
                        markeredgecolor="#444444", linestyle="none",
                        label="Pareto front" if i == front[0] else None)
        if recommended is not None:
            v = rows[recommended][key]
            if isinstance(v, (int, float)) and math.isfinite(v):
                ax.plot([rows[recommended]["batch_size"]], [v], marker="*", markersize=16, color="#D55E00",
                        linestyle="none", label="recommended")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size B")
        ax.set_ylabel(name)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), fontsize=9, frameon=False)
    fig.suptitle(title or "sgtune plan: cost of reaching the tolerance")
    return fig
