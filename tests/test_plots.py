"""Report figures: every figure renders to a valid, non-blank PNG; geometry checked independently."""
from __future__ import annotations

import io
import itertools
import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import chi2

from sgtune.io import plots
from sgtune.cli import main
from sgtune.core.errors import MissingExtraError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_valid_nonblank_png(png: bytes, min_size=(400, 300)) -> np.ndarray:
    """Decode with matplotlib's PNG reader; require a real picture: ≥ 3 % ink and many distinct colours."""
    import matplotlib.image as mpimg

    assert png[:8] == PNG_SIGNATURE
    img = mpimg.imread(io.BytesIO(png), format="png")
    h, w = img.shape[:2]
    assert w >= min_size[0] and h >= min_size[1], img.shape
    rgb = img[..., :3]
    ink = np.mean(np.any(rgb < 0.9, axis=-1))
    assert 0.03 < ink < 0.9, ink
    c = (rgb * 255).astype(np.uint32)
    assert len(np.unique(c[..., 0] << 16 | c[..., 1] << 8 | c[..., 2])) > 50  # lines, text, colour maps
    return img


def _case(rng, d=5):
    a = rng.standard_normal((d, d))
    s = a @ a.T / 100 + 0.01 * np.eye(d)
    return s, 1.1 * s, s + 0.002 * np.eye(d), np.linalg.inv(s) / 1e3


def test_blank_figure_fails_the_image_check():
    """The check above can fail: an empty figure is rejected."""
    from matplotlib.figure import Figure

    with pytest.raises(AssertionError):
        _assert_valid_nonblank_png(plots.render_png(Figure(figsize=(6, 4))))


def test_figure_lambda_renders(rng):
    s, p, _, lam = _case(rng)
    _assert_valid_nonblank_png(plots.render_png(plots.figure_lambda(s, p, lam, names=[f"x{i}" for i in range(5)])))
    fig = plots.figure_lambda(s, p, lam, names=["a", "b"])  # names that do not fit D (mlp): θ0, θ1, … instead
    assert fig.axes[0].get_xlabel().startswith("θ[θ")


def test_figure_verify_renders_without_target_and_with_diagonal_lambda(rng):
    s, p, e, lam = _case(rng)
    _assert_valid_nonblank_png(plots.render_png(plots.figure_verify(p, e, np.diag(lam), title="PASSED")))


def test_figure_calibrate_renders_with_pit_and_small_dimensions(rng):
    s, p, e, lam = _case(rng)
    _assert_valid_nonblank_png(plots.render_png(plots.figure_calibrate(s, p, e, lam, pit=rng.random(5), ks=0.3)))
    s, p, e, lam = _case(rng, 1)  # D = 1: no pair, intervals instead of ellipses
    _assert_valid_nonblank_png(plots.render_png(plots.figure_calibrate(s, p, e, lam)))


def test_most_correlated_pairs_matches_brute_force(rng):
    s, *_ = _case(rng, 6)
    corr = s / np.sqrt(np.outer(np.diag(s), np.diag(s)))
    brute = sorted(itertools.combinations(range(6), 2), key=lambda ij: -abs(corr[ij]))[:4]
    assert plots.most_correlated_pairs(s, 4) == brute
    assert plots.most_correlated_pairs(np.eye(1)) == []


def test_ellipse_boundary_is_the_chi2_contour(rng):
    s, *_ = _case(rng, 2)
    pts = plots._ellipse(s, 0.95)
    q = np.einsum("in,ij,jn->n", pts, np.linalg.inv(s), pts)
    np.testing.assert_allclose(q, chi2.ppf(0.95, 2), rtol=1e-10)


def test_write_png_is_atomic_and_bad_input_is_named(tmp_path, rng):
    s, p, _, lam = _case(rng)
    out = tmp_path / "f.png"
    plots.write_png(out, b"\x89PNG-bytes")
    assert out.read_bytes() == b"\x89PNG-bytes" and [f.name for f in tmp_path.iterdir()] == ["f.png"]
    with pytest.raises(Exception, match=r"predicted covariance must be \(5, 5\)"):
        plots.figure_lambda(s, p[:3, :3], lam)
    bad = s.copy()
    bad[0, 0] = np.nan
    with pytest.raises(Exception, match="target covariance has non-finite entries"):
        plots.figure_lambda(bad, p, lam)


def test_missing_matplotlib_is_a_one_line_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'sgtune\[plot\]'"):
        plots.require_matplotlib()


# --- the --plot option on the commands ----------------------------------------------------------
LAMBDA = ["lambda", "--example", "logistic", "--batch-size", "64", "-q"]


def test_cli_lambda_plot_writes_png_and_refuses_overwrite(tmp_path):
    png = tmp_path / "lam.png"
    r = CliRunner().invoke(main, [*LAMBDA, "--plot", str(png)])
    assert r.exit_code == 0, r.stderr
    json.loads(r.stdout)
    _assert_valid_nonblank_png(png.read_bytes())
    r = CliRunner().invoke(main, [*LAMBDA, "--plot", str(png)])
    assert r.exit_code == 1 and "--plot" in r.stderr and "--overwrite" in r.stderr


def test_cli_plot_without_matplotlib_fails_first_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png, js = tmp_path / "lam.png", tmp_path / "lam.json"
    r = CliRunner().invoke(main, [*LAMBDA, "--plot", str(png), "--json", str(js)])
    assert r.exit_code == 1 and "pip install 'sgtune[plot]'" in r.stderr
    assert not png.exists() and not js.exists()


def test_cli_verify_and_calibrate_plots(tmp_path):
    png = tmp_path / "v.png"
    r = CliRunner().invoke(main, ["verify", "--example", "logistic", "--batch-size", "64", "--steps", "2000",
                                  "--chains", "4", "--relative-tolerance", "0.2", "-q", "--plot", str(png)])
    assert r.exit_code in (0, 3), r.stderr
    _assert_valid_nonblank_png(png.read_bytes())
    doc = json.loads(r.stdout)  # logistic: non-Gaussian posterior, so the KSD is reported beside the test
    assert 0 < doc["ksd"] and 1000 < doc["ksd_n_samples"] <= 2000 and doc["ksd_iid_reference"] > 0
    theta = tmp_path / "t.npy"
    np.save(theta, np.zeros(5))
    png = tmp_path / "c.png"
    r = CliRunner().invoke(main, ["calibrate", "--example", "logistic", "--batch-size", "64", "--steps", "2000",
                                  "--chains", "2", "-q", "--true-theta", str(theta), "--plot", str(png)])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["ksd"] > 0
    _assert_valid_nonblank_png(png.read_bytes())
