"""Thread counts for the thread-determinism tests.

numba fixes the size of its thread pool at start-up (``NUMBA_NUM_THREADS``, by default the number
of CPUs); ``set_num_threads`` raises beyond it. A test that compares one thread with "many" therefore
asks for at least 2 where the pool allows it, and for the pool size otherwise: under
``NUMBA_NUM_THREADS=1`` (a one-core machine, or the portability re-run in ``test_portability.py``)
the comparison degenerates to 1 against 1, and the test's other comparisons (chunked runs) still
run. On any machine with two or more CPUs — CI included — the default run compares 1 and ≥ 2 threads.
"""
import numba


def many_threads(current: int) -> int:
    """At least 2 threads (or ``current`` if larger), capped at the pool size numba was started with."""
    return min(max(2, current), int(numba.config.NUMBA_NUM_THREADS))
