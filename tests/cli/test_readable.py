"""The human tables say what a good value is, leave out what was not computed, and name the next command."""
from __future__ import annotations

from click.testing import CliRunner

from sgtune.cli import main
from sgtune.cli._readable import KSD_IID_SPREAD, MIN_KS_VALUES, applicability_rows, health_row, ks_row, ksd_row


def test_ksd_is_judged_against_independent_draws():
    (name, text), = ksd_row({"ksd": 1.005, "ksd_iid_reference": 0.7175})
    assert "1.005 vs 0.72 for independent posterior draws" in text and "as close as" in text
    (_, text), = ksd_row({"ksd": 0.7175 * (KSD_IID_SPREAD + 0.5), "ksd_iid_reference": 0.7175})
    assert "further from the posterior" in text
    assert ksd_row({}) == []


def test_calibration_ks_needs_enough_values():
    (_, text), = ks_row(0.4, 3)
    assert text.startswith("not shown") and "3 PIT values" in text
    (_, text), = ks_row(0.05, 400)  # 5 % critical value 1.36/√400 = 0.068
    assert "consistent with calibrated" in text
    (_, text), = ks_row(0.4, MIN_KS_VALUES)  # critical value 1.36/√20 = 0.30
    assert "NOT calibrated" in text
    assert ks_row(None, 3) == []


def test_quantities_not_computed_are_left_out():
    doc = {"checked": True, "applicable": False, "equilibration_steps": "inf", "predicted_deviation": "inf",
           "mean_shift": 0.0}
    names = [k for k, _ in applicability_rows(doc, 12.0)]
    assert names == ["applicable", "tau (worst)"]
    doc.update(applicable=True, equilibration_steps=40.0, predicted_deviation=0.01, mean_shift=0.02)
    rows = dict(applicability_rows(doc, 12.0))
    assert "fine below 0.05" in rows["non-quadratic deviation"] and "sd" in rows["mean shift"]
    assert health_row({"healthy": False, "reasons": ["a", "b"]})[1].startswith("UNHEALTHY: a (+1 more")


def test_lambda_table_ends_with_the_next_command(tmp_path):
    out = tmp_path / "lam.npy"
    r = CliRunner().invoke(main, ["lambda", "--example", "hetero-linear", "--batch-size", "64", "-o", str(out),
                                  "--no-applicability"])
    assert r.exit_code == 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last == f"next: sgtune verify --example hetero-linear --batch-size 64 --lambda {out}"
    assert "(stable below 1" in r.stderr


def test_ksd_row_on_a_run_that_does_not_target_the_posterior():
    """A sandwich or SGD run is not meant to match the posterior: the row must not read as a verdict on it."""
    for doc in ({"target": "sandwich", "inverse_temperature": 2000.0}, {"inverse_temperature": "inf"}):
        (name, text), = ksd_row({"ksd": 3.0, "ksd_iid_reference": 0.7, **doc})
        assert name == "KSD (vs the posterior)" and "does not target the posterior" in text
        assert "further from the posterior" not in text
    (name, _), = ksd_row({"ksd": 3.0, "ksd_iid_reference": 0.7, "target": "posterior", "inverse_temperature": 2000.0})
    assert name == "KSD to the posterior"
