"""The theory takes the run configuration (one Dynamics); the keyword forms of 0.1 are gone (0.2.0).

Each old form must be a one-line TypeError that names the new form (not a warning, not a result). A TuningResult records the configuration that tuned it, and
``sgtune.workflows.refine.refine`` re-tunes with exactly that configuration (the block family's blocks
and the criterion included), independently of the command line.
"""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.io.data import example
from sgtune.models import expand, get_model
from sgtune.theory import adjoint, largescale, stationary, tuning


@pytest.fixture(scope="module")
def e():
    return expand(get_model("logistic"), example("logistic"), 1.0)


def _gone(fn, *args, **kw):
    """Call a form of 0.1: a one-line TypeError that names the Dynamics form (no DeprecationWarning, no result)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError) as info:
            fn(*args, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    assert any(s in msg for s in ("Dynamics", "unexpected keyword argument", "dynamics")), msg
    return msg


def test_the_keyword_forms_of_0_1_are_type_errors_naming_the_new_form(e):
    lam = 0.3 * np.eye(e.dim)
    S = e.sandwich_cov()
    kw = dict(batch_size=16, inv_temperature=3000.0, without_replacement=True, momentum=0.4)
    for fn, args in [(stationary.predict_stationary_cov, (e, lam)), (stationary.max_stable_step, (e, lam)),
                     (adjoint.criterion_gradient, (e, lam, adjoint.affine_discrepancy(S))),
                     (largescale.stationary_cov_from_target, (e, lam, S, S)),
                     (largescale.stationary_cov_from_target_momentum, (e, lam, S, S)),
                     (tuning.closed_form_step_matrix, (e, S))]:
        assert "got ndarray" in _gone(fn, *args) and "0.2.0" in _gone(fn, *args)  # Λ where the Dynamics goes
        _gone(fn, *args, **kw)
    assert "unexpected keyword argument 'batch_size'" in _gone(tuning.tune, e, batch_size=16)
    assert "missing 1 required positional argument: 'dynamics'" in _gone(tuning.tune, e)
    assert "tune(expansion, Dynamics(None, batch_size" in _gone(tuning.tune, e, None)
    _gone(stationary.noise_covariance, e, S, batch_size=16)
    _gone(stationary.predict_comparison_cov, e, lam, theory="ct")
    _gone(stationary.stationary_cov_evaluator, e, batch_size=16)
    _gone(adjoint.GradientEvaluator, e, adjoint.affine_discrepancy(S), batch_size=16)


def test_the_matrix_free_forms_of_0_1_are_type_errors():
    rng = np.random.default_rng(0)
    U = rng.standard_normal((300, 6))
    p = 1 / (1 + np.exp(-U @ rng.standard_normal(6) / 3))
    w, c = p * (1 - p), p - (rng.random(300) < p)
    _gone(largescale.posterior_diagonal_step_sizes, U, w, c, 1.0, batch_size=8, probes=8)
    problem = largescale.RankOneProblem(U, w, c, 1.0)
    msg = _gone(largescale.posterior_covariance_error, problem, np.full(6, 0.1))
    assert "posterior_covariance_error(RankOneProblem(U, w, c, γ), Dynamics(step_sizes" in msg
    new = largescale.posterior_diagonal_step_sizes(problem, Dynamics(None, 8, 1e3), largescale.ProbeOptions(probes=8))
    assert new.diagonal.shape == (6,) and new.probes == 8


def test_mixing_the_forms_or_misspelling_a_keyword_is_a_type_error(e):
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
        stationary.predict_stationary_cov(e, Dynamics(0.1, 8), batch_size=8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        stationary.predict_stationary_cov(e, 0.1, batchsize=8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentum'"):
        tuning.tune(e, Dynamics(None, 8), momentum=0.5)


# --------------------------------------------------------------------------- the result records its configuration
def test_tuning_result_records_its_configuration(e):
    dyn = Dynamics(None, 16, inv_temperature=3000.0, momentum=0.2, batching="reshuffle")
    res = tuning.tune(e, dyn, target="posterior", family="block", blocks=[[0, 1], [2, 3, 4]])
    np.testing.assert_array_equal(res.dynamics.step, res.step_matrix)
    assert (res.dynamics.batch_size, res.dynamics.momentum, res.dynamics.batching) == (16, 0.2, "reshuffle")
    assert res.target == "posterior" and res.family == "block" and res.family_criterion == "discrepancy"
    assert [b.tolist() for b in res.blocks] == [[0, 1], [2, 3, 4]]
    assert res.stationary.dynamics.batching == "reshuffle"
    again = res.retune(e, res.target_cov)  # the same configuration: the same Λ
    np.testing.assert_array_equal(again.step_matrix, res.step_matrix)
    assert again.family_criterion == "discrepancy" and [b.tolist() for b in again.blocks] == [[0, 1], [2, 3, 4]]
    assert tuning.tune(e, Dynamics(None, 16), family="diagonal", family_criterion="moment").family_criterion == "moment"


def test_refine_retunes_the_block_family_with_its_blocks(e, monkeypatch):
    """The chains are replaced by a fake measurement Σ̂ = 1.1 Σ* (small MCSE): one correction round must re-tune
    the *block* family over the *given* blocks with the *given* criterion (before, refine dropped the blocks, the
    re-tune failed for every damping and the first Λ came back unchanged)."""
    from sgtune.workflows import refine as refine_mod

    blocks = [[0, 2], [1, 3, 4]]  # not the model's own (a GLM has none)
    res = tuning.tune(e, Dynamics(None, 16), family="block", blocks=blocks, family_criterion="moment")
    calls = []

    def fake_run_chains(*args, **kw):
        calls.append(args)
        return SimpleNamespace(cov=1.1 * res.target_cov, cov_standard_error=1e-6 * np.abs(res.target_cov))

    monkeypatch.setattr(refine_mod, "run_chains", fake_run_chains)
    new, rounds = refine_mod.refine(None, None, e, res, rounds=2)
    assert len(rounds) == 2 and len(calls) == 2
    assert rounds[0].lambda_change > 0  # re-tuned
    assert new.family == "block" and new.family_criterion == "moment" and new.method == res.method
    assert [b.tolist() for b in new.blocks] == blocks
    assert new.dynamics.batch_size == 16
    off = np.ones((e.dim, e.dim), dtype=bool)
    for b in blocks:
        off[np.ix_(b, b)] = False
    assert np.all(new.step_matrix[off] == 0) and not np.allclose(new.step_matrix, res.step_matrix)
    # the corrected target is the congruence G Σ* Gᵀ with G Σ̂ Gᵀ = Σ*: Σ̂ = 1.1 Σ* gives Σ*/1.1
    np.testing.assert_allclose(new.target_cov, res.target_cov / 1.1, rtol=1e-10)
