"""The sampler's public forms: run_chains(model, data, Dynamics, RunSpec, options), the keyword forms of 0.1
as one-line TypeErrors naming the new form (removed in 0.2.0), and the sampler registry."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from sgtune.core.config import Dynamics, RunSpec
from sgtune.core.errors import SgtuneError
from sgtune.sampler import SGHMCOptions, SmileOptions, run_chains, run_quadratic_chains
from sgtune.sampler.registry import SAMPLERS, default_inv_temperature, options_for, sampler_spec
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target


def _data(n=60, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 3))
    y = (r.random(n) < 1 / (1 + np.exp(-X @ np.array([0.5, -0.3, 0.2])))).astype(float)
    return X, y


def _same(a, b):
    for f in ("final_state", "mean", "cov", "cov_standard_error", "diverged_at", "trace", "step_size_final",
              "energy_error_mean", "preconditioner"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=f)


def _gone(fn):
    """A form of 0.1: a one-line TypeError that names the new form (no DeprecationWarning, no result)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError) as info:
            fn()
    msg = str(info.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("sampler, extra", [("sgld", dict(momentum=0.5, batching="reshuffle", thin=3)),
                                            ("sghmc", dict(friction=2.0))])
def test_old_keyword_form_is_a_type_error_naming_the_new_form(sampler, extra):
    X, y = _data()
    kw = dict(batch_size=8, n_steps=80, n_chains=2, seed=3, sampler=sampler, **extra)
    msg = _gone(lambda: run_chains("logistic", (X, y), 0.05, initial=np.zeros(3), **kw))
    assert "removed in 0.2.0" in msg and "run_chains(model, data, Dynamics(" in msg and "RunSpec(n_steps" in msg
    msg = _gone(lambda: run_chains("logistic", (X, y), Dynamics(0.05, 8), RunSpec(80), n_chains=2))
    assert "'n_chains'" in msg and "RunSpec(n_steps" in msg


def test_old_quadratic_and_ensemble_forms_are_type_errors_naming_the_new_form():
    A = np.array([[2.0, 0.3], [0.3, 1.0]])
    msg = _gone(lambda: run_quadratic_chains(A, 0.1, n_steps=60, n_chains=2, inv_temperature=5.0,
                                             noise_cov=np.eye(2), seed=1))
    assert "removed in 0.2.0" in msg and "Dynamics(step_matrix" in msg
    t = make_target("gaussian", "isotropic", dim=4)
    msg = _gone(lambda: run_smile_ensemble(t, "smile", 0.2, n_steps=50, n_chains=2, kappa=0.99))
    assert "removed in 0.2.0" in msg and "RunSpec(n_steps" in msg
    msg = _gone(lambda: run_smile_ensemble(t, 0.2, RunSpec(50), SmileOptions(), n_chains=2))
    assert "'n_chains'" in msg


def test_old_names_and_backends_are_gone():
    import sgtune.sampler.reshuffle as smp

    assert not hasattr(smp, "run_reshuffle_chains_python")
    t = make_target("gaussian", "isotropic", dim=4)
    with pytest.raises(SgtuneError, match="backend must be 'numba' or an object with prepare"):
        run_smile_ensemble(t, 0.2, RunSpec(50, n_chains=2), SmileOptions(), backend=lambda *a: None)
    with pytest.raises(SgtuneError, match="backend must be 'numba' or a backend object for SMILE ensembles"):
        run_smile_ensemble(t, 0.2, RunSpec(50, n_chains=2), SmileOptions(), backend="python")


def test_registry_is_complete_and_options_name_their_sampler():
    assert list(SAMPLERS) == ["sgld", "sglrw", "clipped-sgld", "sghmc", "smile-naive", "psmile-naive", "smile",
                              "psmile"]
    for name, spec in SAMPLERS.items():
        assert options_for(name).sampler == name
        assert sampler_spec(options_for(name)) is spec
        assert spec.grads_per_step == (3 if spec.mclmc else 1)
        assert spec.rules, name
    assert SmileOptions(preconditioned=True, tuned=False).sampler == "psmile-naive"
    with pytest.raises(SgtuneError, match="sampler must be one of"):
        sampler_spec("hmc")
    with pytest.raises(SgtuneError, match="friction"):
        SGHMCOptions(friction=0.0)


def test_inverse_temperature_rules_come_from_the_registry():
    assert math.isinf(default_inv_temperature(SAMPLERS["sgld"], math.inf, 100))
    assert default_inv_temperature(SAMPLERS["sghmc"], math.inf, 100) == 100.0
    assert default_inv_temperature(SAMPLERS["smile"], 7.0, 100) == 7.0
    with pytest.raises(SgtuneError, match="finite inverse temperature"):
        default_inv_temperature(SAMPLERS["sglrw"], math.inf, 100)


def test_predictions_come_from_the_registry():
    # SG(L)D: the linearised stationary covariance; the tuned SMILE samplers: the tempered posterior;
    # SGHMC without a noise estimate and SMILE-naive: no exact prediction (their minibatch bias)
    assert {n: s.prediction for n, s in SAMPLERS.items()} == {
        "sgld": "covariance", "sglrw": None, "clipped-sgld": None, "sghmc": None, "smile-naive": None,
        "psmile-naive": None, "smile": "posterior", "psmile": "posterior"}
    from sgtune.workflows.bnn import GRADS_PER_STEP

    assert GRADS_PER_STEP == {n: SAMPLERS[n].grads_per_step for n in GRADS_PER_STEP}


def test_new_form_rejects_what_the_sampler_does_not_take():
    X, y = _data()
    run = RunSpec(10, n_chains=1)
    with pytest.raises(SgtuneError, match="scalar step size"):
        run_chains("logistic", (X, y), Dynamics(np.array([0.1, 0.2, 0.3]), 8), run, SmileOptions(), initial=np.zeros(3))
    with pytest.raises(SgtuneError, match="momentum"):
        run_chains("logistic", (X, y), Dynamics(0.1, 8, momentum=0.5), run, SGHMCOptions(), initial=np.zeros(3))
    with pytest.raises(TypeError, match="RunSpec"):
        run_chains("logistic", (X, y), Dynamics(0.1, 8), 10)


def test_the_driver_asks_the_model_each_question_once():
    """run_chains reads the model's spec, response check, n_params and parameter names once each
    (sgtune.models.base.model_record), and the chains carry the names it gave."""
    from dataclasses import dataclass

    from sgtune.models import get_model
    from sgtune.models.glm import GLM

    calls: dict[str, int] = {}

    @dataclass(frozen=True)
    class Counted(GLM):
        def _count(self, name):
            calls[name] = calls.get(name, 0) + 1

        def numba_spec(self, n_features=None):
            self._count("numba_spec")
            return super().numba_spec(n_features)

        def check_response(self, y, source="y"):
            self._count("check_response")
            return super().check_response(y, source)

        def n_params(self, n_features):
            self._count("n_params")
            return super().n_params(n_features)

        def parameter_names(self, feature_names):
            self._count("parameter_names")
            return tuple(f"w.{f}" for f in feature_names)

    base = get_model("logistic")
    model = Counted(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    X, y = _data()
    res = run_chains(model, (X, y), Dynamics(0.01, batch_size=10), RunSpec(20, n_chains=2), initial=np.zeros(3))
    assert calls == {"numba_spec": 1, "check_response": 1, "n_params": 1, "parameter_names": 1}
    assert res.parameter_names == ("w.x0", "w.x1", "w.x2")
