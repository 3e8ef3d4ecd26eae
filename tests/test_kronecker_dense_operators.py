"""NetworkOperators' dense path (per-row gradients and Hessians held as arrays, the default for small N·D²) gives
the matrix-free forward-over-reverse products up to rounding, and a whole check is the same either way."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment

from sgtune.workflows import kronecker_applicability as ka  # noqa: E402
from sgtune.workflows.kronecker_applicability import NetworkOperators  # noqa: E402


def _net(likelihood: str):
    """A tanh(3) network on 30 rows of 2 covariates with 1 output (2 for categorical), float64, seed 0."""
    torch.manual_seed(0)
    out = 2 if likelihood == "categorical" else 1
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, out)).double()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 2))
    y = rng.standard_normal(30) if likelihood == "gaussian" else (X[:, 0] > 0).astype(float)
    return net, X, y


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli", "categorical"])
def test_dense_products_equal_the_matrix_free_ones(likelihood):
    net, X, y = _net(likelihood)
    kw = dict(noise_variance=0.3, prior_precision=2.0, chunk_rows=7)  # several chunks on both paths
    free = NetworkOperators(net, X, y, likelihood, dense=False, **kw)
    dense = NetworkOperators(net, X, y, likelihood, **kw)  # the default at this size
    assert free._hessians is None and dense._hessians is not None
    V = np.random.default_rng(1).standard_normal((4, dense.dim))
    rows = np.array([3, 3, 17, 29, 0])  # a repeated row counts twice, as in a with-replacement batch
    for a, b in ((dense.hvp(V), free.hvp(V)), (dense.hvp_rows(V, rows), free.hvp_rows(V, rows)),
                 (dense.directional(V), free.directional(V)), (dense.noise_quadratic(V), free.noise_quadratic(V))):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13 * np.abs(b).max())
    H = np.array([dense.hvp(e)[0] for e in np.eye(dense.dim)])  # symmetric, as a Hessian is
    np.testing.assert_allclose(H, H.T, rtol=0, atol=1e-12 * np.abs(H).max())


def test_a_check_gives_the_same_report_dense_or_matrix_free(monkeypatch):
    from sgtune.core.config import Dynamics
    from sgtune.theory.kronecker import tune_kronecker

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = X @ [1.0, -1.0] + rng.normal(size=300)
    net = torch.nn.Linear(2, 1).double()
    res = tune_kronecker(net, (X, y), Dynamics(None, batch_size=20, inv_temperature=600.0), prior_precision=1.0)
    dense = ka.kronecker_applicability(res, net, X, y, n_random=2).to_dict()
    monkeypatch.setattr(ka, "DENSE_MAX_ENTRIES", 0)
    free = ka.kronecker_applicability(res, net, X, y, n_random=2).to_dict()
    assert dense["applicable"] == free["applicable"] and dense["series_terms"] == free["series_terms"]
    for key in ("real_chain_spectral_radius", "minibatch_growth_per_step"):
        assert dense[key] == pytest.approx(free[key], rel=1e-9)
    for p, q in zip(dense["probes"], free["probes"]):
        assert p["label"] == q["label"] and p["linearised"] == pytest.approx(q["linearised"], rel=1e-9)
