"""Waits that can be interrupted and say how long they take (issue 37): a long dense linear-algebra call runs
where Ctrl-C reaches the main thread at once (:func:`sgtune.models.expansion.interruptible`); a progress line
for a step known to be long appears when it starts; an interrupted step never says "done"."""
from __future__ import annotations

import _thread
import threading

import click
import numpy as np
import pytest

from sgtune.cli._io import announced, rough_seconds
from sgtune.models.expansion import INTERRUPTIBLE_WORK, _inverse_form, interruptible


def test_ctrl_c_reaches_the_main_thread_while_a_long_call_is_still_running():
    started, release = threading.Event(), threading.Event()

    def long_call():
        started.set()
        release.wait(600)  # stands for a minutes-long LAPACK call that holds no interpreter lock
        return 1

    def press_ctrl_c():
        started.wait()
        _thread.interrupt_main()

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            interruptible(2 * INTERRUPTIBLE_WORK, long_call)
        assert not release.is_set()  # interrupted while the call was still blocked, not after it returned
    finally:
        release.set()


def test_interruptible_returns_the_value_and_raises_the_error_of_the_call():
    a = np.random.default_rng(0).standard_normal((5, 5))
    np.testing.assert_array_equal(interruptible(2 * INTERRUPTIBLE_WORK, np.dot, a, a), a @ a)
    with pytest.raises(np.linalg.LinAlgError):
        interruptible(2 * INTERRUPTIBLE_WORK, np.linalg.cholesky, -np.eye(3))
    assert interruptible(0.0, len, "abc") == 3  # small work: called in place


@pytest.mark.parametrize("c", [np.array([[4.0, 1.0], [1.0, 3.0]]), np.diag([1.0, 1e-14, 2.0]),
                               np.outer([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])])
def test_inverse_form_equals_the_pseudo_inverse(c):
    v = np.random.default_rng(1).standard_normal(c.shape[0])
    np.testing.assert_allclose(_inverse_form(c, v), v @ np.linalg.pinv(c, hermitian=True) @ v, rtol=1e-10)


def test_a_long_step_says_so_at_once_and_an_interrupted_one_never_says_done(monkeypatch, capsys):
    monkeypatch.delenv("SGTUNE_PROGRESS_AFTER", raising=False)
    with pytest.raises(KeyboardInterrupt):
        with announced("fitting (about 3 min)", quiet=True, at_once=True):
            raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert err == "fitting (about 3 min) …\n"
    monkeypatch.setenv("SGTUNE_PROGRESS_AFTER", "never")  # a script's explicit threshold wins
    with announced("fitting (about 3 min)", quiet=True, at_once=True):
        pass
    assert capsys.readouterr().err == ""


def test_rough_seconds():
    assert rough_seconds(0.2) == "about 1 s" and rough_seconds(42) == "about 40 s"
    assert rough_seconds(200) == "about 3 min" and rough_seconds(7300) == "about 2 h"


def test_the_applicability_report_above_large_dim_says_roughly_how_long():
    """Above LARGE_DIM the report times one evaluation of the model and says how many it takes (issue 37: K = 50
    classes waited minutes with no word)."""
    from types import SimpleNamespace

    from sgtune.cli._applicability import LARGE_DIM, _announcement, typical_evaluations
    from sgtune.io.data import make_dataset
    from sgtune.models import expand, get_model

    d = LARGE_DIM + 20
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2 * d, d))
    data = make_dataset(X, X[:, 0] + rng.standard_normal(2 * d))
    model = get_model("linear")
    label, _ = _announcement(SimpleNamespace(dim=d, expansion=expand(model, data), model=model), data, 6, np.eye(d))
    k, most = typical_evaluations(6), typical_evaluations(6, 6)
    assert f"{k}–{most} evaluations of the model over {2 * d} rows at D = {d}" in label and "at least" in label
    small, long = _announcement(SimpleNamespace(dim=5), data, 16)
    assert small == "applicability report (the model over the predicted spread)" and not long
