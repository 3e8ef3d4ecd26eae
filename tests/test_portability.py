"""The Monte Carlo and tuner tests pass on another CPU: re-run under ``NUMBA_CPU_NAME=generic``, one thread.

Why this test exists (issue 27): a Monte Carlo test that asserts one chaotic trajectory — a tuned step
size after 5000 steps against a threshold, a kernel equal to its twin after hundreds of non-linear steps —
passes on the machine where it was written and fails on the next one. numba compiles every kernel for
the host CPU: with FMA the MLP gradient fuses multiply-adds (``sgtune/sampler/_jit.py``), LLVM picks
other instructions for other CPUs, and libm differs between systems; each changes the last bits of a
step, and a chaotic chain turns last bits into a different trajectory within a few hundred steps. A
test written as a property (a tolerance from the Monte Carlo error, a binomial bound over many chains)
passes on every trajectory; a test written against one trajectory does not.

So the default run (``python -m pytest``, what ``.ci/run`` executes) re-runs the tests marked
``portability`` — the sampler, tuner and Monte Carlo tests whose outcome depends on a chain's
trajectory or on kernel-vs-twin rounding — a second time in a subprocess compiled for numba's *generic*
CPU of the architecture (on x86-64: SSE2, no FMA or AVX — other instructions and other rounding than the
native build) with
``NUMBA_NUM_THREADS=1`` (another thread layout), its own numba cache (generic machine code is not mixed
with the native one), in one process (``-n 0``), and without the caller's ``-m``/``-k`` selection or
``PYTEST_ADDOPTS``. It fails with
the names of the subprocess's failing tests. The subset is chosen to keep the re-run to a few minutes on
two cores: measured 79 tests, ~380 s of CPU in one process with a cold cache on a shared, loaded machine
(mostly numba compiling the kernels for the generic target, the compiled MLP chain the largest part), ~25 s when
``$NUMBA_CACHE_DIR/portability-generic`` is kept from an earlier run; after issue 38 (the chain loop without
``prange``, one signature per combination, BLAS on one thread) 268 s of CPU cold for 20 engine specialisations
(8–36 s each; 19 since the SGHMC cases share one), 934 s wall on a machine loaded ≈ 12 (2026-11-28); with the batch
schedule a run-time number instead of a compile-time name (:func:`sgtune.sampler.kernels.batch_by_kind`: the four
reshuffling schedules, and GNLD with and without data, share one specialisation each) 14 specialisations, 207 s of CPU
cold (189 user + 18 sys, this test alone, 302 s wall at load 2–4, 2026-11-29).

What is left out, and why. A chain that is an affine, contracting map of θ driven by the same random stream on
every CPU (SG(L)D, SGD with momentum, SGLRW without clipping, GNLD and the reshuffling chains on a quadratic or a
linear regression; SGHMC on a strongly log-concave GLM) carries a rounding difference along without growing it:
its trajectory, and so every result of its tests, is the same on every CPU up to rounding, and a re-run can only
find what the native run found. Such tests are not marked (tests/test_sampler_moments.py, test_sampler_gnld.py,
test_sampler_reshuffle.py, test_calibrate.py, the SGHMC cases of test_sampler_smile_data.py). The marked tests keep
one chain per rule and oracle family whose rounding can grow or decide a discrete event: the SMILE family (tuner,
pSMILE) on a GLM, on the MLP and on the SMILE targets, SGHMC and SGLD on the non-Gaussian targets, SGHMC on the
MLP (the FMA gradient), SGLD with a dense Λ on logistic regression. The CLI tests and the MLP SGLD paths are left
out too: they would add compile time and no trajectory the marked tests do not already exercise. The re-run
collects only the files that name the marker (:func:`marked_files`). Measured the same way before and after
(the marked subset alone, cold cache, generic CPU, load 7–9 on the shared 2-core VM, 2026-11-29): 83 tests,
14 specialisations, 261 s of CPU (239 user + 22 sys), 671 s wall → 54 tests, 7 specialisations, 155 s of CPU
(144 + 12), 360 s wall.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _timeouts import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
#: at least this many tests must be selected, so that a lost marker cannot turn the check into a no-op
MIN_SELECTED = 40


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NUMBA_"))}
    parent_cache = os.environ.get("NUMBA_CACHE_DIR") or str(ROOT / ".numba_cache")
    env.update(NUMBA_CPU_NAME="generic", NUMBA_NUM_THREADS="1",
               NUMBA_CACHE_DIR=str(Path(parent_cache) / "portability-generic"),
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return env


def marked_files() -> list[str]:
    """The test files that name the marker (``mark.portability``: a test carries it only where its file says so).
    The re-run collects these instead of the whole suite: importing every test module costs ≈ 9 s of CPU."""
    return sorted(str(p) for p in (ROOT / "tests").rglob("test_*.py")
                  if p.name != Path(__file__).name and "mark.portability" in p.read_text("utf-8"))


def test_portability_tests_pass_compiled_for_a_generic_cpu_with_one_thread():
    # -n 0: one process. This test runs beside the other xdist worker (tests/conftest.py hands it out first);
    # two workers here would overcommit the two cores and compile the kernels their files share twice.
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "--no-header", "-p", "no:cacheprovider", "-n", "0",
           "-m", "portability and not slow", *marked_files()]
    out = subprocess.run(cmd, cwd=ROOT, env=_child_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)
    log = out.stdout + out.stderr
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", log, flags=re.MULTILINE)
    passed = re.search(r"(\d+) passed", log)
    if out.returncode != 0 or failed:
        pytest.fail(f"under NUMBA_CPU_NAME=generic NUMBA_NUM_THREADS=1 these tests fail: {failed or '(see the log)'}"
                    f"\n--- end of the re-run's log ---\n{log[-3000:]}", pytrace=False)
    n_passed = int(passed.group(1)) if passed else 0
    if n_passed < MIN_SELECTED:
        pytest.fail(f"only {n_passed} tests carry the portability marker (expected ≥ {MIN_SELECTED})\n{log[-2000:]}",
                    pytrace=False)
