"""How results present themselves: parameter names, a short ``repr``, ``summary()`` tables, data frames.

Every result sgtune returns carries ``parameter_names`` (one string per coordinate of θ, in θ order:
the rows and columns of Λ and of every covariance; :func:`sgtune.models.base.parameter_names` says
where they come from). A result's ``repr`` is a line or a few (what it is, D, the key scalars) — never
the arrays; ``summary()`` returns a :class:`SummaryTable`, which prints like a statsmodels summary
(estimate, standard error, z, a 95 % interval; predicted next to measured standard deviations where
both exist); ``to_dataframe()`` is that table as a pandas ``DataFrame`` (pandas is optional and
imported only then) and ``to_dict()`` the result as plain Python values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from .errors import MissingExtraError, ShapeError

__all__ = ["default_parameter_names", "resolve_parameter_names", "short_label", "SummaryTable", "ResultMixin",
           "table_from_columns",
           "estimate_columns", "require_pandas", "Z_95"]

#: the 0.975 quantile of the standard normal distribution (the half-width of a 95 % interval in standard errors)
Z_95 = 1.959963984540054
#: the widest row label of a printed table; longer names keep their start and end around an ellipsis
LABEL_WIDTH = 24


def default_parameter_names(dim: int) -> tuple[str, ...]:
    """``theta[0]`` … ``theta[D−1]``: the names of coordinates nobody named.

    Parameters
    ----------
    dim : int
        D, the number of coordinates.

    Returns
    -------
    tuple of str
        ``theta[0]`` … ``theta[D−1]``.

    Examples
    --------
    >>> default_parameter_names(2)
    ('theta[0]', 'theta[1]')
    """
    return tuple(f"theta[{i}]" for i in range(int(dim)))


def resolve_parameter_names(names: Iterable[Any] | None, dim: int, *, what: str = "parameter_names"
                            ) -> tuple[str, ...]:
    """``names`` as a tuple of D strings (``theta[i]`` when None).

    Parameters
    ----------
    names : iterable or None
        One name per coordinate (converted with ``str``), or None.
    dim : int
        D, the number of coordinates.
    what : str
        What the names are called in the error message.

    Returns
    -------
    tuple of str
        The names.

    Raises
    ------
    ShapeError
        The number of names is not D.

    Examples
    --------
    >>> resolve_parameter_names(None, 2)
    ('theta[0]', 'theta[1]')
    >>> resolve_parameter_names(["age", "dose"], 2)
    ('age', 'dose')
    """
    if names is None:
        return default_parameter_names(dim)
    out = tuple(str(n) for n in names)
    if len(out) != int(dim):
        raise ShapeError(f"{what} has {len(out)} names but θ has D = {dim} coordinates; give one name per "
                         "coordinate (or none for theta[0], theta[1], …)")
    return out


def short_label(name: str, width: int = LABEL_WIDTH) -> str:
    """``name`` cut to ``width`` characters around an ellipsis (start and end kept: indices sit at the end).

    Parameters
    ----------
    name : str
        The name.
    width : int
        The largest length returned.

    Returns
    -------
    str
        ``name`` itself when it fits, else its start, ``…`` and its end.

    Examples
    --------
    >>> short_label("hidden1.weight[0,dose_in_milligrams_per_kilogram]")
    'hidden1.weight[0…logram]'
    """
    name = str(name)
    if len(name) <= width:
        return name
    tail = max(1, (width - 1) // 3)
    return name[: width - 1 - tail] + "…" + name[-tail:]


def require_pandas() -> Any:
    """Import pandas or raise :class:`MissingExtraError` naming the fix.

    Returns
    -------
    module
        The pandas module.

    Raises
    ------
    MissingExtraError
        pandas is not installed.

    Examples
    --------
    >>> require_pandas().__name__
    'pandas'
    """
    try:
        import pandas
    except ImportError:
        raise MissingExtraError("to_dataframe() needs pandas, which is not installed; pip install pandas "
                                "(or use to_dict() / summary())") from None
    return pandas


def estimate_columns(estimate: Any, std_err: Any, *, label: str = "std err") -> dict[str, np.ndarray]:
    """The columns of an estimate table: coef, ``label``, z = coef/se, P>|z| (normal), the 95 % interval.

    Parameters
    ----------
    estimate : (D,) array_like
        The estimates (``coef``).
    std_err : (D,) array_like
        Their standard errors.
    label : str
        The header of the standard-error column.

    Returns
    -------
    dict of str to ndarray
        ``coef``, ``label``, ``z``, ``P>|z|``, ``[0.025`` and ``0.975]``, in that order.

    Examples
    --------
    >>> cols = estimate_columns([1.0], [0.5])
    >>> list(cols), float(cols["z"][0])
    (['coef', 'std err', 'z', 'P>|z|', '[0.025', '0.975]'], 2.0)
    """
    coef = np.asarray(estimate, dtype=float)
    se = np.asarray(std_err, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, coef / se, np.nan)
    p = np.array([math.erfc(abs(v) / math.sqrt(2.0)) if math.isfinite(v) else math.nan for v in z])
    return {"coef": coef, label: se, "z": z, "P>|z|": p, "[0.025": coef - Z_95 * se, "0.975]": coef + Z_95 * se}


def _cell(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "—"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f"{f:.4g}"
    return "—" if v is None else str(v)


@dataclass(frozen=True)
class SummaryTable:
    """A printable table: ``str(table)`` is the text, ``to_dataframe()`` the same rows in pandas.

    Attributes
    ----------
    title : one line saying what the table is.
    index : the row labels (parameter names, or candidate numbers).
    columns : the column headers.
    rows : one tuple of cells per row (floats, ints, strings, booleans).
    info : (key, value) pairs printed above the table (the result's key scalars).
    notes : lines printed under the table (what the columns mean).
    index_name : what the rows are (the data frame's index name).

    Examples
    --------
    >>> t = SummaryTable("example", ("a", "b"), ("sd",), ((1.0,), (2.0,)))
    >>> print(t.as_text().splitlines()[2])
       sd
    """

    title: str
    index: tuple[str, ...]
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    info: tuple[tuple[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    index_name: str = "parameter"

    #: a printed table shows at most this many rows (the first ones and the last few; to_dataframe has all)
    MAX_ROWS = 40

    def as_text(self, max_rows: int | None = None) -> str:
        """The table as text, with at most ``max_rows`` rows (default :attr:`MAX_ROWS`; 0 for all)."""
        limit = self.MAX_ROWS if max_rows is None else int(max_rows)
        idx = list(range(len(self.rows)))
        cut = bool(limit) and len(idx) > limit
        if cut:
            idx = idx[: limit - 5] + [-1] + idx[-5:]
        labels = [short_label(self.index[i]) if i >= 0 else "⋮" for i in idx]
        cells = [[_cell(v) for v in self.rows[i]] if i >= 0 else ["⋮"] * len(self.columns) for i in idx]
        lw = max([len(label) for label in labels] + [len(self.index_name) if not self.index else 0, 1])
        widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(self.columns)]
        header = " " * lw + "".join(f"  {c:>{w}}" for c, w in zip(self.columns, widths))
        body = [f"{lab:<{lw}}" + "".join(f"  {v:>{w}}" for v, w in zip(r, widths)) for lab, r in zip(labels, cells)]
        width = max(len(header), len(self.title))
        lines = [self.title, "=" * width]
        if self.info:
            kw = max(len(k) for k, _ in self.info)
            lines += [f"{k + ':':<{kw + 1}} {_cell(v)}" for k, v in self.info]
            lines.append("-" * width)
        lines += [header, "-" * width, *body, "=" * width]
        if cut:
            lines.append(f"({len(self.rows)} rows; the middle ones are left out — to_dataframe() has all)")
        lines += list(self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        return self.as_text()

    def to_dataframe(self) -> Any:
        """The rows as a pandas ``DataFrame`` (index: the row labels; the info pairs in ``.attrs``)."""
        pd = require_pandas()
        df = pd.DataFrame([list(r) for r in self.rows], index=pd.Index(list(self.index), name=self.index_name),
                          columns=list(self.columns))
        df.attrs.update({"title": self.title, **{k: v for k, v in self.info}})
        return df

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values: title, index, columns, rows (lists), info (a dict), notes."""
        return {"title": self.title, "index": list(self.index), "columns": list(self.columns),
                "rows": [[_plain(v) for v in r] for r in self.rows], "info": {k: _plain(v) for k, v in self.info},
                "notes": list(self.notes)}


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def table_from_columns(title: str, names: Sequence[str], columns: dict[str, Any], **kw: Any) -> SummaryTable:
    """A :class:`SummaryTable` with one row per name from per-coordinate arrays.

    Parameters
    ----------
    title : str
        The table's first line.
    names : sequence of str
        The row labels (D of them).
    columns : dict of str to (D,) array_like
        Header → the column's values.
    **kw
        ``info``, ``notes``, ``index_name`` of :class:`SummaryTable`.

    Returns
    -------
    SummaryTable
        The table.

    Examples
    --------
    >>> t = table_from_columns("example", ["a", "b"], {"sd": [1.0, 2.0]})
    >>> t.index, t.rows
    (('a', 'b'), ((1.0,), (2.0,)))
    """
    cols = {k: np.asarray(v) for k, v in columns.items()}
    rows = tuple(tuple(cols[k][i].item() for k in cols) for i in range(len(names)))
    return SummaryTable(title=title, index=tuple(names), columns=tuple(cols), rows=rows, **kw)


def _repr_value(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    return repr(v) if isinstance(v, str) else _cell(v)


class ResultMixin:
    """A short ``repr`` and ``to_dataframe`` for a result dataclass (declare it with ``repr=False``).

    A result implements ``_repr_items()`` (the key scalars as (name, value) pairs) and ``summary()``.

    Examples
    --------
    >>> from sgtune.io.data import example
    >>> from sgtune.models import expand, get_model
    >>> e = expand(get_model("logistic"), example("logistic"))
    >>> repr(e).startswith("Expansion(model='logistic', D=5")
    True
    """

    def _repr_items(self) -> list[tuple[str, Any]]:
        return []

    def __repr__(self) -> str:
        parts = [f"{k}={_repr_value(v)}" for k, v in self._repr_items()]
        names = getattr(self, "parameter_names", None)
        if names:
            shown = ", ".join(short_label(n, 16) for n in names[:3]) + (", …" if len(names) > 3 else "")
            parts.append(f"parameter_names=({shown})")
        return f"{type(self).__name__}({', '.join(parts)})"

    def summary(self) -> SummaryTable:  # pragma: no cover - every result overrides it
        raise NotImplementedError

    def to_dataframe(self) -> Any:
        """``summary()`` as a pandas ``DataFrame`` (one row per coordinate; needs pandas)."""
        return self.summary().to_dataframe()
