"""The last layer a PyTorch network model offers (:class:`sgtune.models.pytorch.TorchModel`).

``from_torch(module, likelihood)`` offers ``features(theta, X)``, ``last_layer_likelihood`` and
``output_layer(theta)`` when its output layer is identifiable (the module's last ``nn.Linear``, nothing after
it: :func:`sgtune.models.lastlayer.torch_network_features`). Independent routes: the hidden layer computed by
hand in NumPy from θ's layout (``named_parameters`` order, row-major), torch's own ``parameters_to_vector`` of
the output layer, and the parameter names of the whole network.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment

from sgtune.core.config import Dynamics  # noqa: E402
from sgtune.core.errors import SgtuneError  # noqa: E402
from sgtune.io.data import make_dataset  # noqa: E402
from sgtune.models import expand, from_torch  # noqa: E402
from sgtune.models.lastlayer import declared_head, model_last_layer  # noqa: E402
from sgtune.models.user import load_model_file  # noqa: E402
from sgtune.theory.applicability import last_layer_remedy  # noqa: E402
from sgtune.theory.tuning import tune  # noqa: E402

from _networks import write_torch_net  # noqa: E402

nn = torch.nn
#: the hidden layer by torch (float64) and by NumPy from the same θ: rounding only
SAME_FEATURES_ATOL = 1e-12


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(n=30, p=3, seed=0):
    return np.random.default_rng(seed).standard_normal((n, p))


def test_features_are_the_hidden_output_at_theta_and_the_head_starts_at_the_last_linear():
    """φ(x; θ) = tanh(W₁x + b₁) with W₁ = θ[:12] (4×3 row-major), b₁ = θ[12:16] (named_parameters order); the
    head at θ starts at θ's output layer θ[16:21] (weight row, then bias: torch's order), with the network's
    names."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    before = [p.detach().clone() for p in net.parameters()]
    model = from_torch(net, "bernoulli")
    theta = np.linspace(-1.2, 0.9, 21)  # not the module's weights: features must follow θ
    X = _rows()
    phi = np.tanh(X @ theta[:12].reshape(4, 3).T + theta[12:16])
    np.testing.assert_allclose(model.features(theta, X), phi, rtol=0, atol=SAME_FEATURES_ATOL)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))  # the module given is left alone
    assert model.last_layer_likelihood == "bernoulli" and declared_head(model) == ("bernoulli", None)

    y = (X[:, 0] > 0).astype(float)
    head, data = model_last_layer(model, theta, X, y)
    assert head.likelihood == "bernoulli" and head.layout.n_outputs == 1
    np.testing.assert_array_equal(head.trained, theta[16:])
    assert head.parameter_names() == tuple(model.parameter_names()[16:])  # 2.weight[0,j], 2.bias[0]
    np.testing.assert_allclose(data.X[:, :4], phi, rtol=0, atol=SAME_FEATURES_ATOL)
    np.testing.assert_array_equal(head.body_weights, theta)


def test_a_gaussian_network_gives_a_gaussian_head_with_its_noise_variance():
    torch.manual_seed(1)
    model = from_torch(nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)), "gaussian", noise_variance=0.3)
    assert declared_head(model) == ("gaussian", 0.3)
    X = _rows(p=2)
    head, _ = model_last_layer(model, model.flatten(), X, np.sin(X[:, 0]))
    assert head.likelihood == "gaussian" and head.inner.noise_variance == 0.3
    with pytest.raises(SgtuneError, match="declares the noise variance 0.3"):
        model_last_layer(model, model.flatten(), X, np.sin(X[:, 0]), noise_variance=1.0)


def test_a_categorical_network_gives_a_softmax_head_with_k_from_out_features():
    """K = 3 from the last Linear's out_features although y holds only classes 0 and 1 (max(y) + 1 = 2); the head
    in torch's order is the network's output-layer slice of θ, and every head name carries θ's value of that name."""
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 3))
    model = from_torch(net, "categorical")
    assert model.last_layer_likelihood == "softmax"
    theta = np.linspace(-1.0, 1.0, model.dim)
    X = _rows(p=2)
    head, data = model_last_layer(model, theta, X, (X[:, 0] > 0).astype(float))
    assert head.likelihood == "softmax" and head.layout.n_outputs == 3 and data.X.shape == (30, 5)
    np.testing.assert_array_equal(head.trained[head.layout.torch_order()], theta[-15:])
    value = dict(zip(model.parameter_names(), theta))
    np.testing.assert_array_equal(head.trained, [value[n] for n in head.parameter_names()])


def test_dropout_after_the_output_layer_is_the_identity_in_eval_mode():
    """The model runs the module in eval() mode, where a trailing Dropout changes nothing: the layer is identified."""
    torch.manual_seed(4)
    model = from_torch(nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1), nn.Dropout(0.5)), "bernoulli")
    theta, X = model.flatten(), _rows(p=2)
    assert model.last_layer_likelihood == "bernoulli"
    np.testing.assert_allclose(model.features(theta, X), np.tanh(X @ theta[:6].reshape(3, 2).T + theta[6:9]),
                               rtol=0, atol=SAME_FEATURES_ATOL)
    assert model.output_layer(theta)[0] == "2"


class _Linked(nn.Module):
    """The logit through a sigmoid in ``forward``: nothing in its modules shows it."""

    def __init__(self):
        super().__init__()
        self.hidden, self.output = nn.Linear(2, 3), nn.Linear(3, 1)

    def forward(self, x):
        return torch.sigmoid(self.output(torch.tanh(self.hidden(x))))


@pytest.mark.parametrize("build,lik,static,text", [
    (lambda: nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1), nn.Sigmoid()), "bernoulli", None,
     "something follows it (Sigmoid)"),
    (_Linked, "bernoulli", "bernoulli", "something follows it"),
    (lambda: nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)), "poisson", None, "poisson network offers no"),
    (lambda: nn.Linear(2, 1), "gaussian", None, "holds every parameter of the module"),
])
def test_what_has_no_identifiable_output_layer_offers_no_last_layer(build, lik, static, text):
    """``last_layer_likelihood`` None where the modules show it (no remedy is offered), and ``features`` one
    SgtuneError line saying why (a custom forward is caught there, so the remedy is not offered either)."""
    torch.manual_seed(3)
    model = from_torch(build(), lik)
    assert model.last_layer_likelihood == static
    X = _rows(p=2)
    with pytest.raises(SgtuneError, match="no last layer") as err:
        model.features(model.flatten(), X)
    assert text in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SgtuneError, match=re.escape(text)):
        model_last_layer(model, model.flatten(), X, (X[:, 0] > 0).astype(float), likelihood="bernoulli")


def test_a_network_whose_forward_links_its_output_gets_no_remedy(tmp_path):
    """The remedy is computed, not assumed: for a model file whose forward scales the last Linear's output,
    ``last_layer_remedy`` (which builds the head) finds no output layer and offers nothing; the same network
    without the scaling gets the remedy."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(40, 1))
    data = make_dataset(x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(40))
    for module, offered in [("Scaled(1, 2)", False), ("nn.Sequential(nn.Linear(1, 2), nn.Tanh(), nn.Linear(2, 1))",
                                                        True)]:
        net = load_model_file(write_torch_net(tmp_path, module, "gaussian", ", noise_variance=0.01",
                                              name=f"n{int(offered)}.py"))
        e = expand(net, data, 1.0)
        res = tune(e, Dynamics(None, 10, inv_temperature=2.0 * data.n_data), target="posterior")
        rem = last_layer_remedy(net, data, e, res.stationary, res.target_cov)
        assert (rem is not None) == offered
        if offered:
            assert rem.changes["features_from"] == net.source and rem.changes["likelihood"] == "gaussian"
