"""Cost estimates from measurement on this machine (issue 35): the compile-time record next to the numba cache."""
from __future__ import annotations

from sgtune.cli import _timings


def test_compile_estimates_come_from_the_record(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert "not measured on this machine yet" in _timings.compile_estimate("mlp")
    _timings.record_compile("logistic", 21.7)
    assert _timings.timings_path() == tmp_path / "sgtune_timings.json" and _timings.timings_path().exists()
    assert _timings.compile_estimate("logistic").startswith("~22 s (measured on this machine for logistic)")
    text = _timings.compile_estimate("mlp")
    assert "not measured yet for mlp" in text and "22 s" in text
    for s in (250.0, 40.0):
        _timings.record_compile("mlp", s)
    assert _timings.compile_estimate("mlp").startswith("~250 s")
    for s in range(_timings.KEEP + 1):  # only the last KEEP measurements are kept
        _timings.record_compile("mlp", 1.0)
    assert _timings.compile_estimate("mlp").startswith("~1 s")
    (tmp_path / "sgtune_timings.json").write_text("not json")  # a damaged record is ignored, not an error
    assert "not measured" in _timings.compile_estimate("logistic")


def test_a_first_run_records_its_compile(tmp_path, monkeypatch):
    import time

    from sgtune.cli import cmd_run

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cmd_run, "COMPILE_NOTICE_AFTER", 0.01)
    with cmd_run.progress_bar(False, "x", 10, kind="toy") as bar:
        time.sleep(0.05)  # the "compile": the sampler's first progress report comes after it
        bar.update(0)
        bar.update(5)
    assert _timings.compile_estimate("toy").startswith("~0 s (measured")
    assert "toy" in (tmp_path / "sgtune_timings.json").read_text()
