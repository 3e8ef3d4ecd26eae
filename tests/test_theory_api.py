"""The theory takes the run configuration (one Dynamics); the keyword forms of 0.1 still work.

Each old form must emit exactly one DeprecationWarning that names the new form and give the same numbers,
bit for bit, as the new form. A TuningResult records the configuration that tuned it, and
``sgtune.workflows.refine.refine`` re-tunes with exactly that configuration (the block family's blocks
and the criterion included), independently of the command line.
"""
from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.io.data import example
from sgtune.models import expand, get_model
from sgtune.theory import adjoint, largescale, mcerror, stationary, tuning
from sgtune.theory.linear_chain import LinearChain


@pytest.fixture(scope="module")
def e():
    return expand(get_model("logistic"), example("logistic"), 1.0)


def _equal(a, b):
    """Bitwise equality of results (dataclasses, arrays, numbers, tuples) — the Dynamics fields aside."""
    if hasattr(a, "__dataclass_fields__"):
        return all(_equal(getattr(a, k), getattr(b, k)) for k in a.__dataclass_fields__ if k != "dynamics")
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _old(fn, *args, **kw):
    """Call an old form: exactly one DeprecationWarning naming Dynamics; the result."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kw)
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(dep) == 1, [str(w.message) for w in caught]
    assert "Dynamics" in str(dep[0].message) or "LinearChain" in str(dep[0].message)
    assert dep[0].filename == __file__  # it points at the caller's line
    return out


def test_stationary_old_forms_warn_once_and_agree(e):
    d = e.dim
    lam = 0.3 * np.eye(d)
    kw = dict(batch_size=16, inv_temperature=3000.0, without_replacement=True, momentum=0.4)
    dyn = Dynamics(lam, 16, inv_temperature=3000.0, momentum=0.4, batching="without-replacement")
    assert _equal(_old(stationary.predict_stationary_cov, e, lam, **kw), stationary.predict_stationary_cov(e, dyn))
    assert _equal(_old(stationary.predict_stationary_cov, e, step_matrix=lam, method="iterative", **kw),
                  stationary.predict_stationary_cov(e, dyn, method="iterative"))
    S = e.sandwich_cov()
    assert _equal(_old(stationary.noise_covariance, e, S, batch_size=16, without_replacement=True),
                  stationary.noise_covariance(e, S, Dynamics(None, 16, batching="without-replacement")))
    assert _equal(_old(stationary.max_stable_step, e, lam, batch_size=16, momentum=0.4, rtol=1e-4),
                  stationary.max_stable_step(e, Dynamics(lam, 16, momentum=0.4), rtol=1e-4))
    for theory in ("dq-exact", "ct", "dq-const"):
        assert _equal(_old(stationary.predict_comparison_cov, e, lam, batch_size=16, theory=theory,
                           inv_temperature=3000.0),
                      stationary.predict_comparison_cov(e, Dynamics(lam, 16, inv_temperature=3000.0), theory=theory))
    old_ev = _old(stationary.stationary_cov_evaluator, e, batch_size=16, momentum=0.4)
    assert _equal(old_ev(lam), stationary.stationary_cov_evaluator(e, Dynamics(None, 16, momentum=0.4))(lam))


def test_tuning_old_forms_warn_once_and_agree(e):
    for kw, dyn, extra in [
        (dict(batch_size=16), Dynamics(None, 16), dict(method="ct")),
        (dict(batch_size=16, inv_temperature=3000.0, momentum=0.3), Dynamics(None, 16, 3000.0, 0.3),
         dict(target="posterior", family="diagonal", family_criterion="moment")),
        (dict(batch_size=16, without_replacement=True), Dynamics(None, 16, batching="without-replacement"),
         dict(family="block", blocks=[[0, 1], [2, 3, 4]])),
    ]:
        old = _old(tuning.tune, e, **kw, **extra)
        new = tuning.tune(e, dyn, **extra)
        assert _equal(old, new) and old.dynamics.batching == new.dynamics.batching
    S = e.sandwich_cov()
    assert _equal(_old(tuning.closed_form_step_matrix, e, S, batch_size=16, without_replacement=True),
                  tuning.closed_form_step_matrix(e, Dynamics(None, 16, batching="without-replacement"), S))


def test_adjoint_largescale_mcerror_old_forms_warn_once_and_agree(e):
    lam = 0.3 * np.eye(e.dim)
    crit = adjoint.affine_discrepancy(e.sandwich_cov())
    assert _equal(_old(adjoint.criterion_gradient, e, lam, crit, batch_size=16, momentum=0.3),
                  adjoint.criterion_gradient(e, Dynamics(lam, 16, momentum=0.3), crit))
    ev = _old(adjoint.GradientEvaluator, e, crit, batch_size=16, inv_temperature=3000.0)
    assert _equal(ev.evaluate(lam), adjoint.GradientEvaluator(e, crit, Dynamics(None, 16, 3000.0)).evaluate(lam))
    S = e.posterior_cov()
    cbar = stationary.noise_covariance(e, S, Dynamics(None, 16))
    lam = tuning.structured_step_matrix(e.hessian, S, cbar + e.hessian @ S @ e.hessian, family="diagonal",
                                        inv_temperature=4000.0)
    for kappa in (0.0, 0.3):
        dyn = Dynamics(lam, 16, inv_temperature=4000.0, momentum=kappa)
        assert _equal(_old(largescale.stationary_cov_from_target_momentum, e, lam, S, cbar, batch_size=16,
                           momentum=kappa, inv_temperature=4000.0),
                      largescale.stationary_cov_from_target_momentum(e, dyn, S, cbar))
    assert _equal(_old(largescale.stationary_cov_from_target, e, lam, S, cbar, batch_size=16, inv_temperature=4000.0),
                  largescale.stationary_cov_from_target(e, Dynamics(lam, 16, 4000.0), S, cbar))
    st = stationary.predict_stationary_cov(e, Dynamics(0.3, 16, momentum=0.5))
    chain = LinearChain.of(e, Dynamics(0.3, 16, momentum=0.5))
    assert _old(mcerror.cov_error_constant, st.transition, st.augmented_cov, step_matrix=st.step_matrix,
                momentum=0.5) == mcerror.cov_error_constant(chain, st.augmented_cov)


def test_matrix_free_old_forms_warn_once_and_agree():
    rng = np.random.default_rng(0)
    U = rng.standard_normal((300, 6))
    p = 1 / (1 + np.exp(-U @ rng.standard_normal(6) / 3))
    w, c = p * (1 - p), p - (rng.random(300) < p)
    old = _old(largescale.posterior_diagonal_step_sizes, U, w, c, 1.0, batch_size=8, probes=8, inv_temperature=1e3)
    new = largescale.posterior_diagonal_step_sizes(U, w, c, 1.0, Dynamics(None, 8, 1e3), probes=8)
    assert _equal(old, new)
    old = _old(largescale.posterior_covariance_error, U, w, c, 1.0, new.diagonal, batch_size=8, probes=8,
               inv_temperature=1e3, representation="low-rank", rank=3)
    assert _equal(old, largescale.posterior_covariance_error(U, w, c, 1.0, Dynamics(new.diagonal, 8, 1e3), probes=8,
                                                             representation="low-rank", rank=3))


def test_mixing_the_forms_or_misspelling_a_keyword_is_a_type_error(e):
    with pytest.raises(TypeError, match="got also batch_size"):
        stationary.predict_stationary_cov(e, Dynamics(0.1, 8), batch_size=8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        stationary.predict_stationary_cov(e, 0.1, batchsize=8)
    with pytest.raises(TypeError, match="needs a Dynamics"):
        tuning.tune(e)
    with pytest.raises(TypeError, match="got also momentum"):
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
