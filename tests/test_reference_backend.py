"""The public reference backend reaches every entry point (docs/architecture.md's table of backends).

Its agreement with the compiled engine is tested in depth where each entry point is tested: ``run_chains`` and
``run_quadratic_chains`` in test_sampler_kernels.py, ``run_reshuffle_chains`` in test_sampler_reshuffle.py,
``run_sg_gnld`` in test_sampler_gnld.py, ``run_smile_ensemble`` in test_smile_sampler.py (the tests' keywords,
``backend="python"``). Here: the SMILE ensembles through the public class, and what it does not run says so.
"""
from __future__ import annotations

import numpy as np
import pytest

from sgtune.core.config import RunSpec
from sgtune.core.errors import SgtuneError
from sgtune.sampler import run_chains
from sgtune.sampler.reference import ReferenceBackend
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target
from tests.reference import chain_kw


@pytest.mark.portability
def test_the_smile_ensembles_run_on_the_reference_backend():
    # the same draws from the same streams: agreement to rounding along 60 steps (test_smile_sampler.py's TWIN_RTOL)
    t = make_target("gaussian", "isotropic", dim=4)
    run = RunSpec(60, n_chains=2, burn_in=10, thin=5, seed=3)
    a = run_smile_ensemble(t, 0.3, run, SmileOptions(), backend="numba")
    b = run_smile_ensemble(t, 0.3, run, SmileOptions(), backend=ReferenceBackend())
    for field in ("trace", "step_size_trace", "energy_trace", "final_state", "final_step_size"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-12, atol=1e-12, err_msg=field)
    np.testing.assert_array_equal(a.diverged, b.diverged)


def test_smile_on_data_is_refused_with_the_backend_that_runs_it():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 2)), rng.integers(0, 2, 40).astype(float)
    with pytest.raises(SgtuneError, match="pure-Python reference runs sgld, sglrw and clipped-sgld, not 'smile'"):
        run_chains("logistic", (X, y), **chain_kw(0.1, n_steps=10, sampler="smile", backend=ReferenceBackend()))
