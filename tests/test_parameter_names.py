"""Parameter names: one per coordinate of θ, in θ order (the rows of Λ and of every covariance)."""
import numpy as np
import pytest

from sgtune.io.data import make_dataset
from sgtune.models import expand, get_model
from sgtune.models.base import ModelError, parameter_names
from sgtune.models.mlp import MLP


def test_glm_names_are_the_covariates_with_intercept_first():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    ds = make_dataset(X, X @ [1.0, -1.0] + rng.standard_normal(40), intercept=True, names=("age", "dose"))
    e = expand(get_model("linear"), ds)
    assert e.parameter_names == ("intercept", "age", "dose")


def test_mlp_names_follow_the_unflatten_layout():
    """θ = 0..D−1 unflattened: the entry W_l[i, j] (or b_l[i]) holds the index of its own name."""
    m = MLP(hidden_sizes=(3, 2), activation="tanh", likelihood="gaussian")
    feats = ("a", "b", "c", "d")
    names = parameter_names(m, feats, len(feats))
    d = m.n_params(len(feats))
    assert len(names) == d == len(set(names))
    layers = m.unflatten(np.arange(d, dtype=float), len(feats))
    tags = ["hidden1", "hidden2", "output"]
    for tag, (W, b) in zip(tags, layers):
        for i in range(W.shape[0]):
            for j in range(W.shape[1]):
                col = feats[j] if tag == "hidden1" else str(j)
                assert names.index(f"{tag}.weight[{i},{col}]") == W[i, j]
            assert names.index(f"{tag}.bias[{i}]") == b[i]


def test_user_model_names_are_checked_and_default_to_theta_i():
    class Bad:
        name = "bad"

        def n_params(self, p):
            return 3

        def parameter_names(self, feats):
            return ["a", "a", "b"]

    with pytest.raises(ModelError, match="3 distinct strings"):
        parameter_names(Bad(), ("x",), 1)

    class Plain:
        name = "plain"

        def n_params(self, p):
            return 3

    assert parameter_names(Plain(), ("x",), 1) == ("theta[0]", "theta[1]", "theta[2]")


def test_multinomial_names_are_class_then_covariate():
    from sgtune.models.multinomial import Multinomial

    base = Multinomial((0.0, 1.0, 2.0), class_names=("setosa", "versicolor", "virginica"))
    assert parameter_names(base, ("intercept", "x1"), 2) == (
        "class[versicolor].intercept", "class[versicolor].x1", "class[virginica].intercept", "class[virginica].x1")
    full = Multinomial((3.0, 7.0), layout="full")
    assert parameter_names(full, ("x0",), 1) == ("class[3].x0", "class[7].x0")
