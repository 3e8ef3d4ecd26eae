"""The last layer of a user's network model (``--model last-layer --features-from FILE.py:NAME`` naming a model).

A model offering ``features(theta, X)`` and ``last_layer_likelihood`` (:func:`sgtune.models.lastlayer.declared_head`)
has its output layer taken at its fit (the same fit as ``--model FILE.py:NAME``) or at ``--theta-hat``. The network
is written by hand in ``tests/_networks.py`` (NumPy only); the head's MAP is checked against the ridge closed form,
the remedy of :func:`~sgtune.theory.applicability.last_layer_remedy` against its own applicability report.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sgtune.cli import main
from sgtune.core.config import Dynamics
from sgtune.core.errors import SgtuneError, ShapeError
from sgtune.io.data import make_dataset
from sgtune.models import expand, make_mlp
from sgtune.models.lastlayer import declared_head, mlp_last_layer, model_last_layer
from sgtune.models.user import load_model_file
from sgtune.theory.applicability import applicability, last_layer_remedy
from sgtune.theory.tuning import tune

from _networks import write_net

#: the sine regression of tests/cli/test_remedies.py: 40 rows, a 2-unit tanh network, σ² = 0.01
SINE_NET = "TanhNet(2, 'gaussian', 0.01)"


def _sine(n=40, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(n, 1))
    return x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(n)


@pytest.fixture
def sine_files(tmp_path):
    x, y = _sine()
    csv = tmp_path / "s.csv"
    np.savetxt(csv, np.c_[x, y], delimiter=",", header="x,y", comments="")
    return tmp_path, str(csv), write_net(tmp_path, SINE_NET)


def _lam(args):
    return CliRunner().invoke(main, ["lambda", *args, "--prior-precision", "1", "--batch-size", "10", "--target",
                                     "posterior", "--inverse-temperature", "2N", "-q", "--no-applicability"])


def test_the_head_at_given_weights_is_the_ridge_fit_on_their_features(sine_files):
    """--theta-hat: D numbers of the network; the head's MAP is (ΦᵀΦ/σ² + I)⁻¹Φᵀy/σ² on Φ = [tanh(xWᵀ + b), 1]."""
    tmp, csv, spec = sine_files
    theta = np.linspace(-1.0, 1.5, 7)  # W (2, 1), b (2), w (2), c: not a fit, so the head moves away from (w, c)
    np.save(tmp / "w.npy", theta)
    r = _lam([csv, "--model", "last-layer", "--features-from", spec, "--theta-hat", str(tmp / "w.npy")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    x, y = _sine()
    phi = np.c_[np.tanh(x @ theta[:2].reshape(2, 1).T + theta[2:4]), np.ones(len(x))]
    ridge = np.linalg.solve(phi.T @ phi / 0.01 + np.eye(3), phi.T @ y / 0.01)
    np.testing.assert_allclose(doc["theta_hat"], ridge, rtol=0, atol=1e-8 * np.abs(ridge).max())
    assert doc["parameter_names"] == ["output.weight[0,0]", "output.weight[0,1]", "output.bias[0]"]
    assert doc["last_layer"]["likelihood"] == "gaussian" and "net.py:MODEL" in doc["last_layer"]["features"]


def test_without_theta_hat_the_head_is_taken_at_the_fit_of_model_file(sine_files):
    """The same deterministic fit as --model FILE.py:NAME (same prior and seed): θ̂ is stationary in every
    coordinate, so the head refit on its features stays at θ̂'s output layer (w, c)."""
    tmp, csv, spec = sine_files
    r = _lam([csv, "--model", spec])
    assert r.exit_code == 0, r.stderr
    theta = np.asarray(json.loads(r.stdout)["theta_hat"])
    r2 = _lam([csv, "--model", "last-layer", "--features-from", spec])
    assert r2.exit_code == 0, r2.stderr
    np.testing.assert_allclose(json.loads(r2.stdout)["theta_hat"], theta[-3:], rtol=0,
                               atol=1e-6 * np.abs(theta[-3:]).max())


@pytest.mark.parametrize("model,extra,code,text", [
    ("TanhNet(2, 'gaussian', 0.01)", ["--likelihood", "bernoulli"], 1,
     "declares the likelihood 'gaussian' for its output layer, but --likelihood bernoulli was given"),
    ("TanhNet(2, 'gaussian', 0.01)", ["--noise-variance", "0.3"], 1, "declares the noise variance 0.01"),
    ("TanhNet(2, 'gaussian', 0.01)", ["--likelihood", "poisson"], 2, "not poisson"),
    ("TanhNet(2, 'poisson', 0.01)", [], 1, "last_layer_likelihood must be one of gaussian, bernoulli, softmax"),
    ("NoFeatures(2, 'gaussian', 0.01)", [], 1, "has no features(theta, X) method"),
    ("Undeclared(2, 'gaussian', 0.01)", [], 1, "declares no last_layer_likelihood"),
    ("TanhNet(2, 'gaussian', 0.01)", ["--theta-hat", "short.npy"], 1, "--theta-hat must hold D = 7 numbers"),
])
def test_what_cannot_be_a_last_layer_is_one_line(tmp_path, monkeypatch, model, extra, code, text):
    monkeypatch.chdir(tmp_path)
    x, y = _sine()
    np.savetxt("s.csv", np.c_[x, y], delimiter=",", header="x,y", comments="")
    spec = write_net(tmp_path, model, extra=(  # a network without features; one without the declaration
        "\nclass NoFeatures(TanhNet):\n    features = None\n"
        "\nclass Undeclared(TanhNet):\n    def __init__(self, *a):\n        super().__init__(*a)\n"
        "        del self.last_layer_likelihood\n"))
    np.save("short.npy", np.zeros(3))
    r = CliRunner().invoke(main, ["lambda", "s.csv", "--model", "last-layer", "--features-from", spec, *extra,
                                  "--prior-precision", "1", "--batch-size", "10", "-q", "--no-applicability"])
    assert r.exit_code == code, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], r.stderr
    assert "Traceback" not in r.output


@pytest.mark.filterwarnings("ignore::sgtune.core.errors.AccuracyWarning")  # the whole network's solve: 1e-10
def test_a_users_network_gets_its_checked_last_layer_in_python(tmp_path):
    """The generalised remedy: a model loaded from its file names that file; the head is tuned and its own report
    decides ``expect``; a model without a file to name, or without the declaration, gets none."""
    x, y = _sine()
    ds = make_dataset(x, y)
    net = load_model_file(write_net(tmp_path, SINE_NET))
    e = expand(net, ds, 1.0)
    res = tune(e, Dynamics(None, 10, inv_temperature=2.0 * ds.n_data), target="posterior")
    rep = applicability(net, ds, e, res.stationary, target_cov=res.target_cov)
    assert not rep.applicable
    first = rep.reasons[0].remedies[0]
    assert first.changes == {"model": "last-layer", "features_from": net.source, "likelihood": "gaussian",
                             "noise_variance": None, "target": "posterior", "blocks": None}
    head, hdata = model_last_layer(net, e.theta_hat, ds.X, ds.y)
    eh = expand(head, hdata, 1.0)
    rh = tune(eh, Dynamics(None, 10, inv_temperature=2.0 * ds.n_data), target="posterior")
    own = applicability(head, hdata, eh, rh.stationary, target_cov=rh.target_cov)
    assert own.applicable and first.expect == "applicable" and "body frozen" in first.why
    assert last_layer_remedy(net.model, ds, e, res.stationary, res.target_cov) is None  # no file to name
    net.model.last_layer_likelihood = None
    assert last_layer_remedy(net, ds, e, res.stationary, res.target_cov) is None  # nothing declared


def test_model_last_layer_takes_the_declaration_and_keeps_the_mlp_head():
    x, y = _sine()
    mlp = make_mlp("3", noise_variance=0.01)
    theta = np.linspace(-1.0, 1.0, mlp.n_params(1))
    head, data = model_last_layer(mlp, theta, x, y)
    ref, rdata = mlp_last_layer(mlp, theta, x, y)
    np.testing.assert_array_equal(data.X, rdata.X)
    np.testing.assert_array_equal(head.trained, ref.trained)
    np.testing.assert_array_equal(head.body_weights, theta)
    assert declared_head(mlp) == ("gaussian", 0.01) and declared_head(make_mlp("3", likelihood="poisson"))[0] is None
    with pytest.raises(SgtuneError, match="declares the likelihood 'gaussian'"):
        model_last_layer(mlp, theta, x, y, likelihood="bernoulli")
    with pytest.raises(ShapeError, match="D = 10"):
        model_last_layer(mlp, theta[:4], x, y)

    class Features:  # features and a likelihood given by the caller (the command line's --likelihood)
        name = "features-only"

        def features(self, theta, X):
            return np.tanh(X * theta)

    h2, d2 = model_last_layer(Features(), [2.0], x, (y > 0).astype(float), likelihood="bernoulli")
    assert h2.likelihood == "bernoulli" and h2.trained is None
    np.testing.assert_allclose(d2.X[:, 0], np.tanh(2.0 * x[:, 0]), rtol=1e-15)
    with pytest.raises(SgtuneError, match="declares no last_layer_likelihood"):
        model_last_layer(Features(), [2.0], x, y)
    classes = np.digitize(x[:, 0], [-1.0, 1.0]).astype(float)  # 3 classes: "categorical" is the softmax head
    Features.last_layer_likelihood = "categorical"
    h3, d3 = model_last_layer(Features(), [2.0], x, classes)
    assert h3.likelihood == "softmax" and h3.layout.n_outputs == 3 and d3.X.shape == (len(x), 2)
    Features.noise_variance, Features.last_layer_likelihood = "small", "gaussian"
    with pytest.raises(SgtuneError, match="noise_variance must be a number"):
        model_last_layer(Features(), [2.0], x, y)
    with pytest.raises(SgtuneError, match="has no features"):
        model_last_layer(object(), [2.0], x, y)
