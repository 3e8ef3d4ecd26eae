"""The one hang guard of the suite's subprocesses.

A test never asserts a wall time (CPUs and loads differ: a cold numba compile on two busy cores takes many
times what it takes on a quiet one). A subprocess still gets a timeout, so that a hang ends in a failure
instead of a run that never stops; it is long enough that only a hang reaches it (measured: the longest
child, the portability re-run, took over 30 minutes at load 15 on 2 cores where it takes 5 on a quiet CI).
"""

#: seconds after which a child process of a test is taken to hang
HANG_GUARD_S = 3600
