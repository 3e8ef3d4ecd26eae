"""The public reference backend's reach (docs/architecture.md's table of backends and entry points).

Its agreement with the compiled engine is tested per entry point where that entry point is tested:
``run_chains`` and ``run_quadratic_chains`` in test_sampler_kernels.py, ``run_reshuffle_chains`` in
test_sampler_reshuffle.py, ``run_sg_gnld`` in test_sampler_gnld.py. Here: what it does not run says so.
"""
from __future__ import annotations

import pytest

from sgtune.core.config import RunSpec
from sgtune.core.errors import SgtuneError
from sgtune.sampler.reference import ReferenceBackend
from sgtune.sampler.registry import SmileOptions
from sgtune.sampler.smile_ensemble import run_smile_ensemble
from sgtune.sampler.targets import make_target


def test_the_smile_ensembles_are_refused_with_the_backend_that_runs_them():
    t = make_target("gaussian", "isotropic", dim=4)
    with pytest.raises(SgtuneError, match=r"not 'analytic-target' models; use backend='numba'"):
        run_smile_ensemble(t, 0.2, RunSpec(50, n_chains=2), SmileOptions(), backend=ReferenceBackend())
