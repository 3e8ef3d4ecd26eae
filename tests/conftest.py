import os
import signal

import numpy as np
import pytest

# Progress lines ("fitting θ̂ and expanding … done in 3 s") appear when a step is slow, so a test counting stderr
# lines would depend on the machine's speed: the suite turns them off (sgtune.cli._io.progress_after), in this
# process and in the commands it starts. Tests of the progress lines set the variable themselves.
os.environ["SGTUNE_PROGRESS_AFTER"] = "never"


# The signal tests (Ctrl-C, SIGTERM, SIGHUP reaching sgtune in this process or in the commands it starts) need the
# dispositions of an interactive run. A test run started in the background (`pytest &`, `nohup`, a CI runner's
# non-interactive shell) inherits SIGINT and/or SIGHUP ignored, and an ignored signal stays ignored across exec:
# sgtune then (rightly, as for any program under nohup) never sees it, and those tests would fail or wait forever.
# Python's own Ctrl-C handler and the default SIGHUP, in every test process and so in the processes they start.
signal.signal(signal.SIGINT, signal.default_int_handler)
if hasattr(signal, "SIGHUP"):
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


# BLAS on one thread in every test process (and in the processes the tests start): xdist already runs one worker
# per core, and OpenBLAS threads that wait for a busy core spin. Measured on the shared 2-core VM: the dense
# 1600×1600 ``eigvals`` of test_stationary.py took 19.5 s of CPU with two BLAS threads and 1.6 s with one, and
# ``predict_stationary_cov`` at D = 20 (momentum, iterative) 25.7 s against 1.4 s. Several files limited BLAS
# themselves before (the same measurement, file by file); ``_one_blas_thread`` below does it for all.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # libraries loaded later, subprocesses (CLI tests, portability)
# PyTorch's intra-op pool likewise (it reads OMP_NUM_THREADS when it is first imported, in a worker or a subprocess):
# two pools of two threads in two xdist workers oversubscribe the two cores; one Kronecker check of a small network
# took 29 s with the default and 15 s with one thread (2026-11-29, loaded VM). ``one_torch_thread`` below stays for
# modules that want it whatever the environment says.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# Byte-code of the processes the tests start. Where PYTHONDONTWRITEBYTECODE is set (as on the 2-core VM that
# measures the run), each of them — the CLI and README commands, the notebooks, the docs' kernels, the portability
# re-run: hundreds of interpreters — compiled every sgtune module it imported from source again. They may write
# byte-code (``__pycache__/``, ignored by git, beside the sources of this tree; the installed libraries have theirs
# already). Not PYTHONPYCACHEPREFIX: with a prefix Python looks for every library's byte-code there, and numpy,
# scipy, sphinx… were compiled from source again (the docs build 45 → 57 s of CPU). Measured (tests/test_readme.py
# alone, -n 0, warm numba cache, loaded 2-core VM, 2026-11-29): 44.3 → 37.5 s of user CPU; the docs build 45 →
# 42–44 s. Byte-code is the same program: no test and no number depends on it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _one_blas_thread() -> None:
    """The BLAS libraries already loaded (numpy's, imported above) on one thread, for the whole process (module
    comment above); libraries loaded later read OPENBLAS_NUM_THREADS. Once per process, not per test: threadpoolctl
    scans every loaded shared library at each call, ≈ 3.3 ms of CPU with torch and jax loaded, ≈ 7 s over the
    2 270 tests of the default run (an autouse fixture did it for each); nothing in sgtune or the tests raises the
    count again (the tests that limit threads themselves restore 1)."""
    from threadpoolctl import threadpool_limits  # a scikit-learn dependency, in the [dev] extra

    threadpool_limits(limits=1, user_api="blas")


_one_blas_thread()


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh seeded generator per test (numpyro style)."""
    return np.random.default_rng(20261122)


@pytest.fixture
def one_torch_thread():
    """PyTorch on one intra-op thread for the test (restored after): per-sample work on small arrays, where
    intra-op threads only add contention on a shared 2-core machine. Torch test modules use it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: test files handed out first, longest first (measured: the per-file sums of the test durations of a cold-cache
#: default run on two cores, junit XML of main on 2026-11-29, with the savings of the commits that followed it:
#: the generic re-run ≈ 0.54 of its time, test_tuning_families.py and test_sampler_kernels.py shorter). With
#: ``--dist loadfile`` a file runs whole on one worker, and xdist's default order (most tests first) handed these long
#: files with few tests out last: the re-run under a generic CPU (test_portability.py, one test, minutes of numba
#: compiling) started when every other file had finished, and the run ended waiting on it. Longest-first keeps both
#: workers busy to the end. A file missing from this list only runs later; the list is a schedule, not a selection.
RUN_FIRST = (
    "test_portability.py", "test_doctests.py", "test_docs.py", "test_sampler_general.py", "test_readme.py",
    "test_remedies.py", "test_kronecker_beta.py", "test_notebook_wang2026.py", "test_applicability.py",
    "test_sampler_kernels.py", "test_bnn.py", "test_kronecker_remedy.py", "test_sampler_smile_data.py",
    "test_bigdata.py", "test_fuzz.py", "test_sampler_moments.py", "test_symbolic_reshuffle.py",
    "test_kronecker_exact_chains.py", "test_multinomial.py", "test_input_traps.py", "test_cmd_lambda_kronecker.py",
    "test_kronecker_applicability.py",
)


def pytest_collection_modifyitems(config, items):
    """Order files for the xdist scheduler (``--no-loadscope-reorder`` in pyproject): the :data:`RUN_FIRST` files
    longest first, then the others by number of tests, most first (xdist's own default order). The sort is
    stable and its key is per file, so a file's tests stay together and in their written order."""
    per_file: dict = {}
    for item in items:
        per_file[item.path] = per_file.get(item.path, 0) + 1
    rank = {name: i for i, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(RUN_FIRST)), -per_file[item.path], str(item.path)))
