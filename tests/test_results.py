"""Results a statistician can read: names on every result, a short repr, summary() tables, data frames,
InferenceData from Python."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from sgtune.core.config import Dynamics, RunSpec
from sgtune.core.errors import MissingExtraError, SgtuneError, ShapeError
from sgtune.core.results import SummaryTable, default_parameter_names, resolve_parameter_names, short_label
from sgtune.io.data import make_dataset
from sgtune.models import expand, get_model
from sgtune.models.mlp import MLP
from sgtune.sampler import run_chains
from sgtune.theory.applicability import applicability
from sgtune.theory.stationary import predict_stationary_cov
from sgtune.theory.tuning import tune
from sgtune.workflows.plan import PlanGrid, TimingOptions, plan_run

from _tolerances import SOLVER_RTOL

NAMES = ("age", "dose", "a_very_long_covariate_name_from_a_spreadsheet_column")
SIGMA2 = 1.0


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(3)
    n = 300
    X = rng.standard_normal((n, 3))
    y = X @ [0.5, -1.0, 0.25] + rng.standard_normal(n) * (1 + 0.5 * np.abs(X[:, 0]))  # heteroscedastic
    ds = make_dataset(X, y, names=NAMES)
    model = get_model("linear", noise_variance=SIGMA2)
    e = expand(model, ds)
    return SimpleNamespace(ds=ds, model=model, e=e, X=X, y=y, n=n)


def _sandwich_by_hand(X, y, sigma2):
    """J⁻¹𝓘J⁻¹/N for Gaussian linear regression from the data alone: J = XᵀX/(Nσ²), 𝓘 = mean g gᵀ, g = −x r/σ²."""
    n = X.shape[0]
    theta = np.linalg.solve(X.T @ X, X.T @ y)
    r = y - X @ theta
    J = X.T @ X / (n * sigma2)
    g = -X * (r / sigma2)[:, None]
    fisher = g.T @ g / n
    Jinv = np.linalg.inv(J)
    return theta, Jinv @ fisher @ Jinv / n, Jinv / n


def test_names_reach_every_result_and_default_to_theta_i(problem):
    t = tune(problem.e, Dynamics(None, 32))
    st = predict_stationary_cov(problem.e, Dynamics(t.step_matrix, 32))
    assert problem.e.parameter_names == NAMES
    assert t.parameter_names == st.parameter_names == t.stationary.parameter_names == NAMES
    app = applicability(problem.model, problem.ds, problem.e, t.stationary, target_cov=t.target_cov)
    assert app.parameter_names == NAMES
    p = plan_run(problem.model, problem.ds, problem.e, tolerance=0.2, notes=False,
                 grid=PlanGrid(batch_sizes=[32], families=["dense"]), timing=TimingOptions(enabled=False))
    assert p.parameter_names == NAMES and p.to_dict()["parameter_names"] == list(NAMES)
    assert default_parameter_names(3) == ("theta[0]", "theta[1]", "theta[2]")
    with pytest.raises(ShapeError, match="has 2 names but θ has D = 3"):
        resolve_parameter_names(("a", "b"), 3)


class Quadratic:
    """y ≈ θ₀x + θ₁x²: D = 2 on one covariate, and no names of its own (so θ's are theta[0], theta[1])."""

    name = "quadratic-in-x"
    fit_method = "newton"

    def n_params(self, p):
        return 2

    def _u(self, X):
        return np.column_stack([X[:, 0], X[:, 0] ** 2])

    def per_sample_losses(self, theta, X, y):
        return 0.5 * (y - self._u(X) @ theta) ** 2

    def per_sample_grads(self, theta, X, y):
        return (self._u(X) @ theta - y)[:, None] * self._u(X)

    def per_sample_hessians(self, theta, X, y):
        u = self._u(X)
        return u[:, :, None] * u[:, None, :]


def test_user_model_without_names_gets_theta_i_everywhere():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (200, 1))
    ds = make_dataset(x, 0.3 * x[:, 0] - 0.7 * x[:, 0] ** 2 + 0.1 * rng.standard_normal(200), names=("x",))
    m = Quadratic()
    e = expand(m, ds)
    t = tune(e, Dynamics(None, 20))
    res = run_chains(m, ds, Dynamics(t.step_matrix, 20), RunSpec(200, n_chains=2, seed=1), initial=e.theta_hat)
    assert e.parameter_names == t.parameter_names == res.parameter_names == ("theta[0]", "theta[1]")
    assert list(t.summary().to_dataframe().index) == ["theta[0]", "theta[1]"]


def test_mlp_names_reach_the_prediction():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((150, 2))
    ds = make_dataset(X, np.tanh(X @ [1.0, -1.0]) + 0.1 * rng.standard_normal(150), names=("u", "v"))
    m = MLP(hidden_sizes=(2,), activation="tanh", likelihood="gaussian")
    e = expand(m, ds, prior_precision=1.0, seed=0)
    st = predict_stationary_cov(e, Dynamics(1e-3, 30))
    assert e.parameter_names == st.parameter_names == tuple(m.parameter_names(("u", "v")))
    assert "hidden1.weight[0,u]" in st.parameter_names
    assert list(st.summary().to_dataframe().index) == list(st.parameter_names)


def test_reprs_are_short_and_hold_no_arrays(problem):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((400, 40))  # D = 40: a dataclass repr would print thousands of characters
    ds = make_dataset(X, X @ rng.standard_normal(40) + rng.standard_normal(400))
    e = expand(get_model("linear"), ds)
    t = tune(e, Dynamics(None, 64))
    res = run_chains("linear", ds, Dynamics(t.step_matrix, 64), RunSpec(400, n_chains=2, seed=0))
    app = applicability(get_model("linear"), ds, e, t.stationary)
    for obj in (e, t, t.stationary, res, app):
        text = repr(obj)
        assert len(text) < 400 and text.count("\n") == 0 and "array(" not in text, text
        assert text.startswith(type(obj).__name__ + "(")
        assert "D=40" in text or isinstance(obj, type(app))  # the applicability report is about checks, not D
    assert "momentum=0" in repr(t) and "inv_temperature=inf" in repr(t)  # the chain a Λ is for, not only its B


def test_summary_std_err_is_the_targets_sd_computed_from_the_data(problem):
    theta, sandwich, posterior = _sandwich_by_hand(problem.X, problem.y, SIGMA2)
    t = tune(problem.e, Dynamics(None, 32), target="sandwich")
    df = t.summary().to_dataframe()
    assert list(df.index) == list(NAMES)
    np.testing.assert_allclose(df["coef"], theta, rtol=SOLVER_RTOL)
    np.testing.assert_allclose(df["std err"], np.sqrt(np.diag(sandwich)), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(df["z"], theta / np.sqrt(np.diag(sandwich)), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(df["0.975]"] - df["[0.025"], 2 * 1.959963984540054 * np.sqrt(np.diag(sandwich)),
                               rtol=SOLVER_RTOL)
    # the dense Λ reaches the target exactly: the predicted sd equals it
    np.testing.assert_allclose(df["sd predicted"], np.sqrt(np.diag(sandwich)), rtol=1e-8)
    post = problem.e.summary(target="posterior").to_dataframe()
    np.testing.assert_allclose(post["std err"], np.sqrt(np.diag(posterior)), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(post["sd sandwich"], np.sqrt(np.diag(sandwich)), rtol=SOLVER_RTOL)
    text = str(t.summary())
    assert "coef" in text and "std err" in text and short_label(NAMES[2]) in text and NAMES[0] in text


def test_chain_summary_and_dataframe_round_trip(problem):
    t = tune(problem.e, Dynamics(None, 32))
    res = run_chains(problem.model, problem.ds, Dynamics(t.step_matrix, 32), RunSpec(2000, n_chains=2, seed=4))
    table = res.summary(predicted=t)
    df = table.to_dataframe()
    np.testing.assert_allclose(df["sd"], np.sqrt(np.diag(res.cov)), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(df["mean"], res.mean, rtol=SOLVER_RTOL)
    np.testing.assert_allclose(df["sd predicted"], np.sqrt(np.diag(t.predicted_cov)), rtol=SOLVER_RTOL)
    d = table.to_dict()
    pd = pytest.importorskip("pandas")
    back = pd.DataFrame(d["rows"], index=pd.Index(d["index"], name="parameter"), columns=d["columns"])
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert res.to_dict()["parameter_names"] == list(NAMES)
    assert t.to_dict()["parameter_names"] == list(NAMES) and t.to_dict()["lambda"] is t.step_matrix


def test_long_tables_are_cut_when_printed_but_not_in_the_frame():
    n = 100
    names = tuple(f"hidden1.weight[{i},some_long_feature_name]" for i in range(n))
    table = SummaryTable("t", names, ("a",), tuple((float(i),) for i in range(n)))
    text = str(table)
    assert "⋮" in text and "100 rows" in text and text.count("\n") < 60
    assert max(len(line) for line in text.splitlines()) < 100
    pytest.importorskip("pandas")
    assert len(table.to_dataframe()) == n and table.to_dataframe().index[-1] == names[-1]


def test_to_dataframe_without_pandas_is_one_clear_error(problem, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(MissingExtraError, match="to_dataframe\\(\\) needs pandas.*pip install pandas"):
        problem.e.to_dataframe()
    assert "coef" in str(problem.e.summary())  # the table itself needs no pandas


def test_inference_data_from_python_carries_the_names_and_the_trace(problem):
    pytest.importorskip("arviz")
    t = tune(problem.e, Dynamics(None, 32))
    res = run_chains(problem.model, problem.ds, Dynamics(t.step_matrix, 32),
                     RunSpec(1000, n_chains=3, thin=5, seed=2))
    idata = res.to_inference_data(theta_hat=problem.e.theta_hat)
    post = idata.posterior["theta"]
    assert list(post["theta_dim"].values) == list(NAMES)
    np.testing.assert_array_equal(post.values, res.trace)
    assert list(idata.constant_data["theta_hat"]["theta_dim"].values) == list(NAMES)
    renamed = res.to_inference_data(parameter_names=["a", "b", "c"])
    assert list(renamed.posterior["theta_dim"].values) == ["a", "b", "c"]
    with pytest.raises(ShapeError, match="has 1 names"):
        res.to_inference_data(parameter_names=["a"])
    thin_less = run_chains(problem.model, problem.ds, Dynamics(t.step_matrix, 32), RunSpec(200, n_chains=2))
    with pytest.raises(SgtuneError, match="kept no draws"):
        thin_less.to_inference_data()


def test_default_names_carry_no_layout_for_the_exports():
    """theta[i] names (a model that named nothing) export like a result without names: θ order."""
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from sgtune.io.export import optax_transform

    lam = 0.01 * np.eye(3)
    base = dict(step_matrix=lam, family="dense", momentum=0.0, inv_temperature=np.inf, batch_size=4,
                without_replacement=False)
    for names in (None, default_parameter_names(3)):
        tx = optax_transform(SimpleNamespace(**base, parameter_names=names), prior="in-loss")
        tx.init(jnp.zeros(3))
        with pytest.raises(SgtuneError, match="Λ carries no parameter names"):
            tx.init({"a": jnp.zeros(1), "b": jnp.zeros(2)})


def test_verification_calibration_plan_and_applicability_present_themselves(problem):
    from sgtune.workflows.verify import verify_stationary_cov
    from sgtune.workflows.calibrate import calibrate

    rep = verify_stationary_cov(problem.model, problem.ds, problem.e, Dynamics(0.05, 32),
                                RunSpec(3000, n_chains=4, seed=1))
    df = rep.summary().to_dataframe()
    assert rep.parameter_names == NAMES and list(df.index) == list(NAMES)
    np.testing.assert_allclose(df["sd predicted"], np.sqrt(np.diag(rep.predicted)), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(df["sd measured"], np.sqrt(np.diag(rep.empirical)), rtol=SOLVER_RTOL)
    assert rep.to_dict()["parameter_names"] == list(NAMES)

    cal = calibrate(problem.model, problem.ds, Dynamics(None, 32), RunSpec(2000, n_chains=2, seed=1))
    theta, sandwich, _ = _sandwich_by_hand(problem.X, problem.y, SIGMA2)
    cdf = cal.summary().to_dataframe()
    np.testing.assert_allclose(cdf["coef"], theta, rtol=SOLVER_RTOL)
    np.testing.assert_allclose(cdf["std err"], np.sqrt(np.diag(sandwich)), rtol=SOLVER_RTOL)
    np.testing.assert_allclose(cdf["sd measured"], np.sqrt(np.diag(cal.chains.cov)), rtol=SOLVER_RTOL)

    p = plan_run(problem.model, problem.ds, problem.e, tolerance=0.2, notes=False,
                 grid=PlanGrid(batch_sizes=[16, 64], families=["dense"]), timing=TimingOptions(enabled=False))
    assert len(p.summary().rows) == 2 and len(p.to_dataframe()) == 2
    app = applicability(problem.model, problem.ds, problem.e, cal.tuning.stationary)
    table = app.summary()
    assert "predicted_deviation" in table.index and table.rows[0][0] == app.predicted_deviation
    for obj in (rep, cal, p, app):
        text = repr(obj)
        assert len(text) < 400 and "\n" not in text and "array(" not in text, text
