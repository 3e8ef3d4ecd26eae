"""The tables notebook of Wang, Ding & Huggins (2026) runs end to end at smoke size."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _timeouts import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.notebook
def test_wang2026_tables_notebook_smoke(tmp_path):
    env = {**os.environ, "SGTUNE_SMOKE": "1", "MPLBACKEND": "Agg", "SGTUNE_FIGURES": str(tmp_path),
           "OPENBLAS_NUM_THREADS": "1",
           # import the package from this tree, not whichever checkout is installed
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    out = subprocess.run([sys.executable, str(ROOT / "notebooks" / "wang2026_tables.py")],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "DQ+exact" in out.stdout and "optimal γ" in out.stdout
    assert (tmp_path / "wang2026_figure1.png").exists()
