"""Report figures (matplotlib, the optional ``[plot]`` extra): covariance ellipses, Λ heat map, PIT histogram.

Each ``figure_*`` function takes plain arrays (what the result dataclasses carry) and returns a
:class:`matplotlib.figure.Figure` built without pyplot (no global state, no GUI backend);
:func:`render_png` turns it into PNG bytes and :func:`write_png` writes them atomically, so a
command can render before it writes anything and never leaves a partial file.

Panels:

- :func:`draw_covariance_ellipses` — 95 % ellipses {δ : δᵀΣ⁻¹δ ≤ χ²₂(0.95)} of the target,
  predicted and empirical covariances of θ for one coordinate pair, centred at θ̂
  (axes are θ_i − θ̂_i in the parameter's units); the pairs shown are the most correlated
  ones (:func:`most_correlated_pairs`).
- :func:`draw_step_matrix` — Λ as a heat map (diverging colours centred at 0 when Λ has
  negative entries).
- :func:`draw_pit_histogram` — the calibration PIT values q_d (Unif(0, 1) when calibrated) with
  the uniform density and the KS distance.
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ._files import atomic_path
from ..core.errors import MissingExtraError, SgtuneError

__all__ = ["require_matplotlib", "most_correlated_pairs", "draw_covariance_ellipses", "draw_step_matrix",
           "draw_pit_histogram", "draw_marginal_sd_ratios", "figure_lambda", "figure_verify", "figure_calibrate", "render_png", "write_png",
           "ELLIPSE_LEVEL"]

#: probability mass inside the drawn ellipses
ELLIPSE_LEVEL = 0.95

# colour-blind-safe (Okabe–Ito) styles per covariance role
_STYLES = {
    "target": {"color": "#000000", "linestyle": "-", "linewidth": 2.0},
    "predicted": {"color": "#0072B2", "linestyle": "--", "linewidth": 2.0},
    "empirical": {"color": "#E69F00", "linestyle": ":", "linewidth": 2.4},
}
_LABELS = {"target": "target S*", "predicted": "predicted Σ(Λ)", "empirical": "empirical (chains)"}


def require_matplotlib() -> None:
    """Raise :class:`MissingExtraError` (one line, naming the extra) when matplotlib is not installed.

    Raises
    ------
    MissingExtraError
        If matplotlib is not installed.

    Examples
    --------
    >>> require_matplotlib()   # matplotlib is installed: nothing happens
    """
    try:
        import matplotlib  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise MissingExtraError("plotting (`plot`) needs matplotlib, which is not installed; "
                                "pip install 'sgtune[plot]'") from None


def most_correlated_pairs(cov: Any, n_pairs: int = 3) -> list[tuple[int, int]]:
    """Return the ``n_pairs`` coordinate pairs (i < j) with the largest |correlation| in ``cov`` (ties: lowest index).

    Parameters
    ----------
    cov : (D, D) array_like
        A covariance.
    n_pairs : int, optional
        How many pairs.

    Returns
    -------
    list of (int, int)
        The pairs, most correlated first (empty for D = 1).

    Examples
    --------
    >>> most_correlated_pairs([[1.0, 0.1, 0.9], [0.1, 1.0, 0.0], [0.9, 0.0, 1.0]], 2)
    [(0, 2), (0, 1)]
    """
    c = np.asarray(cov, float)
    d = c.shape[0]
    if d < 2:
        return []
    sd = np.sqrt(np.clip(np.diag(c), 1e-300, None))
    corr = np.abs(c / np.outer(sd, sd))
    iu = np.triu_indices(d, 1)
    order = np.argsort(-corr[iu], kind="stable")[:n_pairs]
    return [(int(iu[0][k]), int(iu[1][k])) for k in order]


def _ellipse(cov2: np.ndarray, level: float) -> np.ndarray:
    """Boundary points (2, 200) of {δ : δᵀC⁻¹δ ≤ χ²₂(level)} for a 2×2 PSD C (via eigh: works when singular)."""
    w, v = np.linalg.eigh(0.5 * (cov2 + cov2.T))
    r = np.sqrt(-2.0 * np.log1p(-level) * np.clip(w, 0.0, None))  # χ²₂ quantile: −2 log(1 − level)
    t = np.linspace(0.0, 2.0 * np.pi, 200)
    return v @ (r[:, None] * np.vstack([np.cos(t), np.sin(t)]))


def _name(names: Sequence[str] | None, i: int) -> str:
    return str(names[i]) if names is not None and i < len(names) and names[i] else f"θ{i}"


def draw_covariance_ellipses(ax: Any, covariances: Mapping[str, Any], i: int, j: int, *,
                             names: Sequence[str] | None = None, level: float = ELLIPSE_LEVEL,
                             legend: bool = True) -> None:
    """Draw the ``level`` ellipses of each covariance's (i, j) block on ``ax`` (roles: target/predicted/empirical).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    covariances : mapping of str to (D, D) array_like or None
        Role (``"target"``, ``"predicted"``, ``"empirical"``) -> covariance; None entries are skipped.
    i, j : int
        The coordinate pair.
    names : sequence of str, optional
        The coordinates' names (default θ0, θ1, …).
    level : float, optional
        The probability mass inside the ellipses.
    legend : bool, optional
        Whether to draw the legend.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> ax = Figure().subplots()
    >>> draw_covariance_ellipses(ax, {"target": np.eye(2), "predicted": 1.1 * np.eye(2)}, 0, 1)
    >>> len(ax.lines)   # two ellipses, two axis lines, the centre
    5
    """
    first = None
    for role, cov in covariances.items():
        if cov is None:
            continue
        c = np.asarray(cov, float)
        first = c if first is None else first
        pts = _ellipse(c[np.ix_([i, j], [i, j])], level)
        ax.plot(pts[0], pts[1], label=_LABELS.get(role, role), **_STYLES.get(role, {}))
    ax.axhline(0.0, color="0.85", linewidth=0.8, zorder=0)
    ax.axvline(0.0, color="0.85", linewidth=0.8, zorder=0)
    ax.plot([0.0], [0.0], marker="+", color="0.3", markersize=8, linestyle="none")
    ni, nj = _name(names, i), _name(names, j)
    if first is not None:
        rho = first[i, j] / np.sqrt(max(first[i, i] * first[j, j], 1e-300))
        ax.set_title(f"{ni} vs {nj}: {int(round(100 * level))}% ellipses (ρ = {rho:+.2f})", fontsize=10)
    ax.set_xlabel(f"θ[{ni}] − θ̂[{ni}]")
    ax.set_ylabel(f"θ[{nj}] − θ̂[{nj}]")
    ax.ticklabel_format(style="sci", scilimits=(-3, 3), axis="both")
    ax.grid(True, color="0.93")
    if legend:
        ax.legend(fontsize=8, loc="best", title=f"{int(round(100 * level))}% ellipses", title_fontsize=8)


def _draw_intervals_1d(ax: Any, covariances: Mapping[str, Any], names: Sequence[str] | None,
                       level: float) -> None:
    """D = 1: the central ``level`` intervals ±z·sd of each covariance as horizontal bars."""
    from scipy.stats import norm

    z = norm.ppf(0.5 + level / 2)
    k = 0
    for role, cov in covariances.items():
        if cov is None:
            continue
        sd = float(np.sqrt(np.asarray(cov, float).reshape(-1)[0]))
        ax.plot([-z * sd, z * sd], [k, k], label=_LABELS.get(role, role), **_STYLES.get(role, {}))
        k += 1
    ax.set_yticks([])
    ax.set_ylim(-1, k)
    ax.set_xlabel(f"θ[{_name(names, 0)}] − θ̂")
    ax.set_title(f"{int(round(100 * level))}% intervals", fontsize=10)
    ax.legend(fontsize=8)


def draw_step_matrix(ax: Any, step_matrix: Any, *, names: Sequence[str] | None = None) -> Any:
    """Draw Λ as a heat map on ``ax``.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    step_matrix : (D, D) or (D,) array_like
        Λ (a vector is its diagonal).
    names : sequence of str, optional
        The coordinates' names (default θ0, θ1, …).

    Returns
    -------
    matplotlib.image.AxesImage
        The image (for the colour bar).

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> ax = Figure().subplots()
    >>> draw_step_matrix(ax, [0.1, 0.2]).get_array().shape
    (2, 2)
    """
    lam = np.asarray(step_matrix, float)
    if lam.ndim == 1:
        lam = np.diag(lam)
    if np.any(lam < 0):
        m = float(np.max(np.abs(lam))) or 1.0
        im = ax.imshow(lam, cmap="RdBu_r", vmin=-m, vmax=m, interpolation="nearest")
    else:
        im = ax.imshow(lam, cmap="viridis", interpolation="nearest")
    d = lam.shape[0]
    if d <= 20:
        labels = [_name(names, k) for k in range(d)]
        ax.set_xticks(range(d), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(d), labels, fontsize=7)
    ax.set_title("step-size matrix Λ", fontsize=10)
    ax.set_xlabel("column j")
    ax.set_ylabel("row i")
    return im


def draw_marginal_sd_ratios(ax: Any, covariances: Mapping[str, Any], *, names: Sequence[str] | None = None) -> None:
    """Draw per-coordinate marginal standard deviations relative to the first covariance given (1 = agreement).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    covariances : mapping of str to (D, D) array_like or None
        Role -> covariance; the first is the reference, None entries are skipped.
    names : sequence of str, optional
        The coordinates' names (default θ0, θ1, …).

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> ax = Figure().subplots()
    >>> draw_marginal_sd_ratios(ax, {"target": np.eye(2), "empirical": np.diag([1.21, 0.81])})
    >>> np.round(ax.lines[1].get_ydata(), 2)
    array([1.1, 0.9])
    """
    roles = [(k, np.sqrt(np.clip(np.diag(np.asarray(v, float)), 0.0, None)))
             for k, v in covariances.items() if v is not None]
    ref_role, ref = roles[0]
    d = ref.size
    xs = np.arange(d)
    markers = {"target": "s", "predicted": "o", "empirical": "D"}
    for role, sd in roles:
        st = _STYLES.get(role, {})
        ax.plot(xs, sd / np.where(ref > 0, ref, np.nan), marker=markers.get(role, "o"), markersize=5,
                color=st.get("color"), linestyle=st.get("linestyle", "-"), linewidth=1.0,
                label=_LABELS.get(role, role))
    ax.axhline(1.0, color="0.6", linewidth=0.8, zorder=0)
    ratios = np.concatenate([sd / np.where(ref > 0, ref, np.nan) for _, sd in roles])
    ratios = ratios[np.isfinite(ratios)]
    lo, hi = (float(ratios.min()), float(ratios.max())) if ratios.size else (1.0, 1.0)
    pad = 0.1 * (hi - lo)
    ax.set_ylim(min(0.95, lo - pad), max(1.05, hi + pad))  # ±5 % at least: agreement reads as a flat line
    ax.ticklabel_format(axis="y", useOffset=False)
    if d <= 20:
        ax.set_xticks(xs, [_name(names, k) for k in range(d)], rotation=90, fontsize=7)
    ax.set_xlabel("coordinate")
    ax.set_ylabel(f"marginal sd / sd of {_LABELS.get(ref_role, ref_role)}")
    ax.set_title("marginal standard deviations", fontsize=10)
    ax.grid(True, color="0.93")


def draw_pit_histogram(ax: Any, pit: Any, ks: float | None = None) -> None:
    """Draw the histogram of the PIT values q_d (density scale) against the Unif(0, 1) density.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    pit : array_like
        The PIT values q_d in [0, 1].
    ks : float, optional
        The KS distance, shown in the title.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> ax = Figure().subplots()
    >>> draw_pit_histogram(ax, np.linspace(0.05, 0.95, 16), ks=0.05)
    >>> ax.get_title()
    'calibration PIT (KS = 0.050)'
    """
    q = np.asarray(pit, float).reshape(-1)
    bins = int(np.clip(round(np.sqrt(q.size)), 4, 20))
    heights, _, _ = ax.hist(q, bins=bins, range=(0.0, 1.0), density=True, color="#56B4E9", edgecolor="white",
                            label=f"PIT q_d (D = {q.size})")
    ax.set_ylim(0.0, 1.45 * max(float(np.max(heights)), 1.0))  # head room for the legend
    ax.axhline(1.0, color="#000000", linestyle="--", linewidth=1.5, label="Unif(0, 1) density")
    ax.plot(q, np.zeros_like(q), "|", color="#D55E00", markersize=12, label="q_d")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("q_d = fraction of draws ≤ θ*_d")
    ax.set_ylabel("density")
    title = "calibration PIT"
    if ks is not None:
        title += f" (KS = {ks:.3f})"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", ncols=2)


def _figure(n_rows: int, width_panels: int) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(max(4.4 * width_panels, 11.0), 4.3 * n_rows), layout="constrained", dpi=110)


def _covariance_panels(fig: Any, axes: Sequence[Any], covs: Mapping[str, Any], names: Sequence[str] | None,
                       pairs: Sequence[tuple[int, int]]) -> None:
    if not pairs:
        _draw_intervals_1d(axes[0], covs, names, ELLIPSE_LEVEL)
        return
    for ax, (i, j) in zip(axes, pairs):
        draw_covariance_ellipses(ax, covs, i, j, names=names, legend=False)
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        return
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=9, frameon=False)


def _validated(name: str, arr: Any, dim: int | None = None) -> np.ndarray:
    a = np.asarray(arr, float)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or (dim is not None and a.shape[0] != dim):
        want = f"({dim}, {dim})" if dim is not None else "square"
        raise SgtuneError(f"plot: {name} must be {want} but has shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise SgtuneError(f"plot: {name} has non-finite entries; nothing to draw")
    return a


def _layout(covs: Mapping[str, Any], step_matrix: Any, names: Sequence[str] | None, n_pairs: int,
            extra: int, title: str) -> tuple[Any, list[Any]]:
    first = next(c for c in covs.values() if c is not None)
    d = np.asarray(first).shape[0]
    checked = {k: (None if v is None else _validated(f"{k} covariance", v, d)) for k, v in covs.items()}
    if names is not None and len(names) != d:  # e.g. covariate names for an mlp's weights: label θ0, θ1, …
        names = None
    pairs = most_correlated_pairs(first, n_pairs)
    n_cov = max(1, len(pairs))
    # two rows on a 6-column grid: the ellipses on top, Λ (and the PIT histogram) below
    fig = _figure(2, max(n_cov, 2))
    gs = fig.add_gridspec(2, 6)
    width = 6 // n_cov
    cov_axes = [fig.add_subplot(gs[0, k * width:(k + 1) * width]) for k in range(n_cov)]
    _covariance_panels(fig, cov_axes, checked, names, pairs)
    lam_ax = fig.add_subplot(gs[1, :2] if extra else gs[1, :3])
    sd_ax = fig.add_subplot(gs[1, 2:4] if extra else gs[1, 3:])
    draw_marginal_sd_ratios(sd_ax, checked, names=names)
    extra_axes = [fig.add_subplot(gs[1, 4:])] if extra else []
    lam = np.asarray(step_matrix, float)
    im = draw_step_matrix(lam_ax, lam if lam.ndim == 2 else np.diag(lam), names=names)
    fig.colorbar(im, ax=lam_ax, shrink=0.9, label="Λ_ij  [θ² / mean loss]")
    fig.suptitle(title, fontsize=12)
    return fig, extra_axes


def figure_lambda(target_cov: Any, predicted_cov: Any, step_matrix: Any, *, names: Sequence[str] | None = None,
                  n_pairs: int = 3, title: str = "") -> Any:
    """Build the figure of ``sgtune lambda --plot``: target vs predicted covariance ellipses and Λ.

    The ellipses are drawn for the most correlated pairs of the target (:func:`most_correlated_pairs`).

    Parameters
    ----------
    target_cov, predicted_cov : (D, D) array_like
        S* and Σ(Λ).
    step_matrix : (D, D) or (D,) array_like
        Λ.
    names : sequence of str, optional
        The coordinates' names (default θ0, θ1, …).
    n_pairs : int, optional
        How many pairs of coordinates to draw.
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (no pyplot state).

    Raises
    ------
    MissingExtraError
        If matplotlib is not installed.
    SgtuneError
        If a covariance is not (D, D) or has non-finite entries.

    Examples
    --------
    >>> fig = figure_lambda(np.eye(3), 1.05 * np.eye(3), 0.1 * np.eye(3))
    >>> len(fig.axes)   # three pairs, Λ, its colour bar, the marginal sds
    6
    """
    fig, _ = _layout({"target": target_cov, "predicted": predicted_cov}, step_matrix, names, n_pairs, 0,
                     title or "tuned step-size matrix: target vs predicted stationary covariance")
    return fig


def figure_verify(predicted: Any, empirical: Any, step_matrix: Any, *, target_cov: Any = None,
                  names: Sequence[str] | None = None, n_pairs: int = 3, title: str = "") -> Any:
    """Build the figure of ``sgtune verify --plot``: (target,) predicted and empirical covariance ellipses, and Λ.

    Parameters
    ----------
    predicted, empirical : (D, D) array_like
        Σ(Λ) and the chains' covariance.
    step_matrix : (D, D) or (D,) array_like
        Λ.
    target_cov : (D, D) array_like, optional
        S*, drawn when given.
    names : sequence of str, optional
        The coordinates' names (default θ0, θ1, …).
    n_pairs : int, optional
        How many pairs of coordinates to draw.
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (no pyplot state).

    Raises
    ------
    MissingExtraError
        If matplotlib is not installed.
    SgtuneError
        If a covariance is not (D, D) or has non-finite entries.

    Examples
    --------
    >>> fig = figure_verify(np.eye(2), 0.9 * np.eye(2), [0.1, 0.1], title="PASSED")
    >>> fig.get_suptitle()
    'PASSED'
    """
    covs = {"target": target_cov, "predicted": predicted, "empirical": empirical}
    if target_cov is None:
        covs = {"predicted": predicted, "empirical": empirical}
    fig, _ = _layout(covs, step_matrix, names, n_pairs, 0, title or "prediction vs chains")
    return fig


def figure_calibrate(target_cov: Any, predicted_cov: Any, empirical_cov: Any, step_matrix: Any, *,
                     pit: Any = None, ks: float | None = None, names: Sequence[str] | None = None,
                     n_pairs: int = 3, title: str = "") -> Any:
    """Build the figure of ``sgtune calibrate --plot``: target/predicted/empirical ellipses, Λ and the PIT histogram.

    Parameters
    ----------
    target_cov, predicted_cov, empirical_cov : (D, D) array_like
        S*, Σ(Λ) and the chains' covariance.
    step_matrix : (D, D) or (D,) array_like
        Λ.
    pit : array_like, optional
        The PIT values q_d (with θ*); their histogram is drawn when given.
    ks : float, optional
        Their KS distance.
    names : sequence of str, optional
        The coordinates' names (default θ0, θ1, …).
    n_pairs : int, optional
        How many pairs of coordinates to draw.
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (no pyplot state).

    Raises
    ------
    MissingExtraError
        If matplotlib is not installed.
    SgtuneError
        If a covariance is not (D, D) or has non-finite entries.

    Examples
    --------
    >>> fig = figure_calibrate(np.eye(2), np.eye(2), 1.1 * np.eye(2), [0.1, 0.1], pit=[0.2, 0.7], ks=0.3)
    >>> [ax.get_title() for ax in fig.axes if "PIT" in ax.get_title()]
    ['calibration PIT (KS = 0.300)']
    """
    fig, rest = _layout({"target": target_cov, "predicted": predicted_cov, "empirical": empirical_cov},
                        step_matrix, names, n_pairs, 1 if pit is not None else 0,
                        title or "calibration (Algorithm 1)")
    if pit is not None:
        draw_pit_histogram(rest[0], pit, ks)
    return fig


def render_png(fig: Any, *, dpi: int = 110) -> bytes:
    """Render a figure to PNG bytes (Agg; nothing touches the file system).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    dpi : int, optional
        The resolution.

    Returns
    -------
    bytes
        The PNG file's contents.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> render_png(Figure(figsize=(1, 1)), dpi=20)[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def write_png(path: str | os.PathLike[str], png: bytes) -> None:
    """Write PNG bytes atomically (temporary file in the same folder + rename).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    png : bytes
        Its contents (:func:`render_png`).

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_png(os.path.join(tmp, "fig.png"), b"\\x89PNG")
    ...     os.listdir(tmp)
    ['fig.png']
    """
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(png)
