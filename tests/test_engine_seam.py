"""The engine's backend seam (``engine.run_plan``, ``engine.backend_of``, ``ChainPlan.recorder_at``), with a
backend that only records its calls: no compilation."""
from __future__ import annotations

import numpy as np
import pytest

from sgtune.core.errors import SgtuneError
from sgtune.sampler.engine import NumbaBackend, backend_of, run_plan
from sgtune.sampler.state import ChainPlan, chain_state, recorder


class _Calls:
    """A backend that records (t0, n_steps, last, which recorder) of each call and what prepare saw."""

    name = "calls"

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool, str]] = []
        self.prepared = 0

    def prepare(self, plan: ChainPlan) -> None:
        self.prepared += 1

    def advance(self, plan: ChainPlan, t0: int, n_steps: int, last: bool) -> None:
        rec = plan.recorder_at(t0, last)
        self.calls.append((t0, n_steps, last, "burn" if rec is plan.burn_recorder else "kept"))


def _plan(n_steps: int, split: int = 0, with_burn: bool = False) -> ChainPlan:
    burn = recorder(2, 3)
    kept = recorder(2, 3, theta_sums=True)
    return ChainPlan(sampler="sgld", lam_kind=1, batching="none", oracle_kind="analytic-target", batch_fn=None,
                     grad_fn=None, rule_fn=None, move_fn=None,
                     state=chain_state(np.zeros((2, 3)), np.zeros((2, 4), dtype=np.uint64)), oracle=None,
                     sched=None, params=None, mclmc=None, recorder=lambda last: kept, burn_in=0, n_steps=n_steps,
                     split=split, burn_recorder=burn if with_burn else None)


@pytest.mark.parametrize("n_steps, split", [(1000, 137), (1000, 0), (7, 3), (120, 120), (50, 49)])
def test_run_plan_covers_every_step_once_and_never_crosses_the_split(n_steps, split):
    backend = _Calls()
    run_plan(_plan(n_steps, split, with_burn=True), backend, None)
    assert backend.prepared == 1
    starts = [c[0] for c in backend.calls]
    assert starts[0] == 0 and all(n > 0 for _, n, _, _ in backend.calls)
    assert [t0 + n for t0, n, _, _ in backend.calls][:-1] == starts[1:]  # contiguous
    assert sum(n for _, n, _, _ in backend.calls) == n_steps
    assert [last for _, _, last, _ in backend.calls] == [False] * (len(backend.calls) - 1) + [True]
    for t0, n, _, which in backend.calls:
        assert not (t0 < split < t0 + n)  # no call crosses the split
        assert which == ("burn" if t0 < split else "kept")
    assert len(backend.calls) <= 51  # 50 chunks, one more at the split


def test_without_a_burn_recorder_every_call_gets_the_plan_recorder():
    backend = _Calls()
    run_plan(_plan(100, split=40), backend, None)
    assert {c[3] for c in backend.calls} == {"kept"}


def test_run_plan_reports_progress_after_prepare_and_each_call():
    seen: list[tuple[int, int]] = []
    backend = _Calls()
    run_plan(_plan(10, split=4, with_burn=True), backend, lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 10) and seen[-1] == (10, 10)
    assert [d for d, _ in seen[1:]] == [t0 + n for t0, n, _, _ in backend.calls]


def test_backend_of_takes_numba_or_a_backend_object():
    assert isinstance(backend_of("numba", "X"), NumbaBackend)
    obj = _Calls()
    assert backend_of(obj, "X") is obj
    with pytest.raises(SgtuneError, match="backend must be 'numba' or a backend object for GNLD, got 'numpy'"):
        backend_of("numpy", "GNLD")
    with pytest.raises(SgtuneError, match=r"an object with prepare\(plan\) and advance"):
        backend_of(lambda *a: None, "SMILE ensembles")
