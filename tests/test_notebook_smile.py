"""The seed-001 notebook (SMILE, Table 1) runs end to end at smoke size."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _timeouts import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.notebook
def test_smile_notebook_smoke():
    # PYTHONPATH: run this checkout's sgtune even when another one is installed
    env = {**os.environ, "SGTUNE_SMOKE": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(ROOT / "notebooks" / "smile_table1.py")],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "fitted order: drift 2.0" in out.stdout and "per step 3.0" in out.stdout
    assert "pSMILE-naive has lower b²" in out.stdout and "step-size trace" in out.stdout


def test_table1_script_smoke():
    """benchmarks/table1_smile.py --smoke on one target and noise (prints the table and the timing table)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "table1_smile.py"), "--smoke",
                          "--targets", "gaussian", "--noises", "diagonal"],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "Table 1" in out.stdout and "speed-up" in out.stdout
