"""``sgtune reshuffle``: exact Gaussian bias of SGLD with random reshuffling vs Robbins–Monro."""
from __future__ import annotations

import csv
from pathlib import Path

import click
import numpy as np

from ..core.errors import DataFormatError
from ..theory.reshuffle import reshuffle_bias
from ._io import check_writable, emit, handle_errors, info
from ._options import json_output_options, load_npy


def _read_vector(path: str, column: str | None) -> np.ndarray:
    """A data vector from ``.npy`` (1-D or (N, 1)) or ``.csv`` (one column, optional header; or ``--column``)."""
    p = Path(path)
    if not p.exists():
        raise DataFormatError(f"--data: file {p} does not exist")
    if p.suffix.lower() == ".npy":
        arr = load_npy(str(p), "--data")
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise DataFormatError(f"--data: {p} must hold a vector (N,) but has shape {arr.shape}")
        try:
            return np.asarray(arr, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataFormatError(f"--data: {p} is not numeric (dtype {arr.dtype})") from None
    if p.suffix.lower() != ".csv":
        raise DataFormatError(f"--data: {p} must end in .npy or .csv")
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:  # -sig: Excel's byte-order mark
            rows = [[c.strip() for c in r] for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataFormatError(f"--data: {p} is not a readable text CSV ({exc}); give a .csv of numbers or a .npy") from None
    if not rows:
        raise DataFormatError(f"--data: {p} is empty")

    def numeric(row: list[str]) -> bool:
        try:
            [float(c) for c in row]
        except ValueError:
            return False
        return True

    header = None if numeric(rows[0]) else rows[0]
    body = rows if header is None else rows[1:]
    width = len(rows[0])
    if column is not None:
        if header is None or column not in header:
            raise DataFormatError(f"--column: no column {column!r} in the header of {p} ({header})")
        j = header.index(column)
    elif width == 1:
        j = 0
    else:
        raise DataFormatError(f"--data: {p} has {width} columns; choose one with --column NAME")
    out = np.empty(len(body))
    for i, row in enumerate(body):
        if len(row) != width:
            raise DataFormatError(f"--data: {p} line {i + 1 + (header is not None)} has {len(row)} "
                                  f"fields, expected {width}")
        try:
            out[i] = float(row[j])
        except ValueError:
            raise DataFormatError(f"--data: {p} line {i + 1 + (header is not None)}: {row[j]!r} "
                                  "is not a number") from None
    return out


@click.command("reshuffle")
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False),
              help="Data vector x_1..x_N: a .npy (N,) or a .csv with one column (header optional).")
@click.option("--column", default=None, help="CSV column to use when the file has several.")
@click.option("--batch-size", "batch_size", required=True, type=int,
              help="Batch size B; must divide N (R = N/B batches per epoch).")
@click.option("--step", required=True, type=float,
              help="Rescaled step h = ηN/σ² (Shaw & Whalley (2025) eq. 8); 0 < h < 2.")
@click.option("--sigma2", type=float, default=None,
              help="σ² of the model U(θ) = Σ(θ − x_i)²/(2σ²) (default: unbiased sample variance).")
@json_output_options
@handle_errors
def cli(data_path: str, column: str | None, batch_size: int, step: float, sigma2: float | None,
        json_path: str | None, overwrite: bool, quiet: bool, strict: bool = False) -> None:
    """Exact asymptotic variance error of ULA, SGLD-RM and SGLD-RR (Shaw & Whalley (2025), section 4).

    \b
    Model: U(θ) = Σ_i (θ − x_i)²/(2σ²), target N(x̄, σ²/N); one step
    θ' = θ − h(θ − x̄_batch) + sqrt(2hσ²/N) ξ.  rel_err = Var/(σ²/N) − 1
    (means are exact).  RR's variance depends on the epoch position k
    (k steps of the epoch taken): rr_by_position lists k = 0..R−1.
    w2_* is the 1-D Gaussian W₂ to the target (a lower bound for SGLD).
    Keys: target_var, {ula,rm,rm_with_replacement,rr_by_position,rr_average}_var,
    *_rel_err, w2_*, leading_coefficients (ε = c1 h + c2 h² + O(h³)).
    """
    check_writable(json_path, overwrite, "--json")
    x = _read_vector(data_path, column)
    res = reshuffle_bias(x, batch_size, step, sigma2)
    doc = res.to_dict()
    doc["rr_average_better_than_rm"] = bool(res.rr_average_rel_err < res.rm_rel_err)
    doc["stable_step_range"] = [0.0, 2.0]
    doc["references"] = ["shaw2025: section 4 (corrected: v = R − 1, exact epoch average)"]
    info(f"N = {res.n}, B = {res.batch_size}, R = {res.n_batches}, h = {res.step:g}, "
         f"σ² = {res.sigma2:.6g}, target var = {res.target_var:.6g}", quiet)
    info(f"{'scheme':<22}{'variance':>14}{'rel. error':>14}{'W2 (lower bd)':>16}", quiet)
    rows = [("ULA", res.ula_var, res.ula_rel_err, res.w2_ula),
            ("SGLD-RM", res.rm_var, res.rm_rel_err, res.w2_rm),
            ("SGLD-RM (with repl.)", res.rm_with_replacement_var, res.rm_with_replacement_rel_err,
             res.w2_rm_with_replacement),
            ("SGLD-RR (avg)", res.rr_average_var, res.rr_average_rel_err, res.w2_rr_average)]
    rows += [(f"SGLD-RR k={k}", float(vk), float(ek), float(wk)) for k, (vk, ek, wk) in
             enumerate(zip(res.rr_by_position_var, res.rr_by_position_rel_err, res.w2_rr_by_position))]
    for name, var, err, w2 in rows[:4 + min(res.n_batches, 8)]:
        info(f"{name:<22}{var:>14.6g}{err:>14.6g}{w2:>16.6g}", quiet)
    if not doc["rr_average_better_than_rm"]:
        info("note: at this step RR's epoch-averaged error is NOT below RM's (typical for h > 1)", quiet)
    emit(doc, json_path)
