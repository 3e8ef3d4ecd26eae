"""The seed-003 notebook runs end to end at smoke size."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _timeouts import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.notebook
def test_stationary_notebook_smoke(tmp_path):
    env = {**os.environ, "SGTUNE_SMOKE": "1", "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, str(ROOT / "notebooks" / "stationary_covariance_tuning.py")],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "dq-exact" in out.stdout and "DQ+exact" in out.stdout
