"""The one place that sets numba options for sgtune's kernels.

``njit`` compiles a helper or a kernel (every kernel is single-threaded: the engine runs ranges of chains
on threads of its own, :mod:`sgtune.sampler.engine`, since the kernels release the GIL). Options:

- ``cache=True``: compiled code is cached on disk (set ``NUMBA_CACHE_DIR`` in CI), so the
  JIT cost (a few seconds per kernel) is paid once per machine, not once per process;
- ``nogil=True``: kernels release the GIL;
- ``fastmath=False``: IEEE semantics, so a kernel and its pure-Python twin agree to
  rounding (≈1e-14) on the same random stream;
- ``error_model="numpy"``: division by zero gives inf/nan instead of raising (and costs
  no branch per division); the kernels detect non-finite states themselves.

``njit_fma`` / :func:`component_fma` (the MLP gradient, :mod:`sgtune.sampler.mlp`) add one
fastmath flag, ``contract``: LLVM may fuse a multiply and the add that consumes it into one FMA
(one rounding instead of two). No reassociation: the order of every sum stays the one written
in the source, so results are still deterministic and independent of the thread count; they
differ from the unfused evaluation by rounding only (≈1e-16 relative), and between a machine
with FMA and one without. The MLP gradient is a long series of multiply-add chains, where
fusion halves the floating-point instructions (measured in ``benchmarks/bench_mlp_sampler.py``).

What LLVM vectorises under these options (checked with ``inspect_asm`` on numba 0.68):
elementwise loops (axpy, copies) go through the loop vectoriser; floating-point reductions
(dot products) do not, because that needs reassociation (fastmath), and numba leaves the SLP
vectoriser off by default (``NUMBA_SLP_VECTORIZE=0``, numba issue #8705), so the explicit
partial sums of :func:`~sgtune.sampler.grads.row_dot` buy instruction-level parallelism
but not SIMD. (Measured: a reassociating dot product would take the 32 row products of the
benchmark step from ≈0.63 µs to ≈0.23 µs; not used, to keep IEEE order and twin agreement.)

Inlined helpers (``njit_inline``, :func:`component_inline`): every call of a compiled function that is
not inlined passes each array argument's reference count through an atomic increment and decrement
(numba's NRT, about 36 atomic operations for the 18 arrays of an engine step rule), and LLVM does not
inline a callee whose body holds many such calls. The engine's small helpers (the moves, the gradient
with its prior, the recorder, the MCLMC integrator's phases) are therefore inlined into their caller in
numba's IR (``inline="always"``), before LLVM sees them: the same arithmetic in the same order (no
fastmath), so the same bits, without the calls. Measured in ``benchmarks/bench_engine_ab.py``.

Components chosen by name (:func:`component`, :data:`COMPONENTS`): a kernel composed of components
(``sgtune.sampler.engine._chains``) takes each component's *name* as a string argument and calls
``numba.literally`` on it, so numba compiles one specialisation per combination of names, with the names in
its signature as ``Literal[str]`` types. The callers :func:`call_batch`, :func:`call_rule`, :func:`call_grad`,
:func:`call_value_grad` and :func:`call_move` are ``numba.extending.overload`` s (``inline="always"``) that
pick the component registered under the literal name while typing: a component declared with
:func:`component_inline` is inlined into the kernel's IR, any other is an ordinary call. All of this is
public numba: the on-disk cache keys a specialisation by its signature (the names), the same in every
process, so the second process loads it (``benchmarks/numba_literal_cache.py`` shows the mechanism on a toy
kernel). In Python (the reference implementation) a caller is ``COMPONENTS[name](...)``.

Cache invalidation (what a maintainer must know): numba's on-disk cache of a function is keyed on the
modification time and size of the file that defines it, and only that file. The engine's kernels inline
helpers from the other sampler modules (``rng``, ``grads``, ``kernels``, ``smile``, ``targets``, …), so after
editing a helper in one file, the cached kernels of *another* file keep the old machine code. After editing
anything under ``sgtune/sampler/``, delete the cache (``rm -r "$NUMBA_CACHE_DIR"``, or
``sgtune/sampler/__pycache__/*.nb[ic]`` without ``NUMBA_CACHE_DIR``); CI starts from an empty cache.
``tests/test_engine_cache.py`` fails (and says so) when the cached engine is older than a sampler source file.

No writable cache (a read-only install, ``docker run --user``, an unwritable ``NUMBA_CACHE_DIR`` and
home directory): numba would refuse to define the kernels ("cannot cache function …"). Then, once at import
and before anything is compiled, :func:`ensure_cache_location` points numba's configuration
(``numba.config.CACHE_DIR``; the environment is left alone) at a per-user folder in the system's temporary
directory (``sgtune-numba-cache-<uid>``, mode 0700, used only when this user owns it; otherwise a fresh one
removed at exit), and with no writable temporary directory either, compiles without a cache.

Only ``sgtune/sampler/`` imports numba.
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from typing import Any

import numba
from numba import types
from numba.extending import overload

__all__ = ["njit", "njit_fma", "njit_inline", "component", "component_fma", "component_inline", "component_name",
           "COMPONENTS", "specialisation", "call_batch", "call_rule", "call_grad", "call_value_grad", "call_move", "NJIT_OPTIONS",
           "NJIT_FMA_OPTIONS", "get_num_threads", "set_num_threads", "ensure_cache_location"]

NJIT_OPTIONS: dict[str, object] = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}
#: NJIT_OPTIONS with FMA contraction only (module docstring)
NJIT_FMA_OPTIONS: dict[str, object] = {**NJIT_OPTIONS, "fastmath": {"contract"}}

_SAMPLER_DIR = os.path.dirname(os.path.abspath(__file__))


def _probe() -> None:  # pragma: no cover - never called: the function numba is asked to cache
    return None


def cache_location_found() -> bool:
    """Would numba find a writable cache folder for the sampler's kernels? Asked of numba itself: declaring a
    cached function in this folder (``numba.njit(cache=True)``) raises ``RuntimeError`` ("cannot cache function
    …: no locator available") when none of its cache folders (``NUMBA_CACHE_DIR``, ``__pycache__`` beside the
    source, the user's cache folder) can be written."""
    try:
        numba.njit(cache=True)(_probe)
    except RuntimeError:
        return False
    return True


def _fallback_cache_dir() -> str | None:
    """A cache folder under the system's temporary directory: ``sgtune-numba-cache-<uid>`` if this user
    owns it and nobody else can write it (it holds machine code), else a fresh folder removed at exit."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is not None:
        base = os.path.join(tempfile.gettempdir(), f"sgtune-numba-cache-{uid}")
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
            st = os.lstat(base)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022:
                return base
        except OSError:
            pass
    try:
        fresh = tempfile.mkdtemp(prefix="sgtune-numba-cache-")
    except OSError:
        return None
    atexit.register(shutil.rmtree, fresh, True)
    return fresh


def ensure_cache_location() -> bool:
    """Make sure numba can cache sgtune's kernels (module docstring); False when nothing is writable
    (then the kernels are compiled without a cache). Sets ``numba.config.CACHE_DIR`` only, never the
    environment."""
    if cache_location_found():
        return True
    folder = _fallback_cache_dir()
    if folder is not None:
        numba.config.CACHE_DIR = folder
        if cache_location_found():
            return True
    return False


if not ensure_cache_location():
    NJIT_OPTIONS["cache"] = False
    NJIT_FMA_OPTIONS["cache"] = False

njit = numba.njit(**NJIT_OPTIONS)
njit_fma = numba.njit(**NJIT_FMA_OPTIONS)
#: ``njit`` inlined into its callers' numba IR (module docstring, "Inlined helpers")
njit_inline = numba.njit(inline="always", **NJIT_OPTIONS)
get_num_threads = numba.get_num_threads
set_num_threads = numba.set_num_threads

#: name -> compiled component (module docstring, "Components chosen by name"); the name is
#: ``<module>.<function>``, e.g. ``sgtune.sampler.kernels.batch_reshuffle``
COMPONENTS: dict[str, Any] = {}


def component_name(fn: Any) -> str:
    """The registered name of a component (a name is returned as it is).

    Raises
    ------
    ValueError
        ``fn`` is neither a registered component nor its name (e.g. a user's own ``@njit`` function).
    """
    if isinstance(fn, str):
        name = fn
    else:
        py = getattr(fn, "py_func", fn)
        name = f"{getattr(py, '__module__', '?')}.{getattr(py, '__qualname__', repr(py))}"
    if COMPONENTS.get(name) is None or (not isinstance(fn, str) and COMPONENTS[name] is not fn):
        raise ValueError(f"{name} is not a component of sgtune's engine (declare it with sgtune.sampler._jit.component)")
    return name


def component(fn, _jit=njit):  # type: ignore[no-untyped-def]
    """``njit`` and registered in :data:`COMPONENTS` under ``<module>.<function>`` (module docstring)."""
    disp = _jit(fn)
    COMPONENTS[f"{fn.__module__}.{fn.__qualname__}"] = disp
    return disp


def component_fma(fn):  # type: ignore[no-untyped-def]
    """:func:`component` compiled with ``njit_fma`` (FMA contraction, module docstring)."""
    return component(fn, njit_fma)


def component_inline(fn):  # type: ignore[no-untyped-def]
    """:func:`component` inlined where it is called by name (module docstring, "Inlined helpers")."""
    return component(fn, njit_inline)


def specialisation(kernel: Any, n_names: int, *args: Any) -> Any:
    """The compiled ``kernel`` for ``args`` whose first ``n_names`` are component names: compiled (or loaded from the
    cache) on first use, then returned at the cost of typing the arguments.

    A kernel that calls ``numba.literally`` on an argument is specialised on its value, but numba's dispatcher
    matches a call from Python against the argument's ordinary type first (a str, not ``Literal[str]``) and
    re-derives the literal specialisation on every call (≈ 20 ms); ``kernel.compile`` with the literal signature
    returns the entry point directly (numba's public ``Dispatcher.compile``).
    """
    sig = tuple(types.literal(a) if i < n_names else numba.typeof(a) for i, a in enumerate(args))
    return kernel.compile(sig)


def _chosen(name: Any) -> Any:
    """The component a literal name selects while numba types a caller (None: not literal yet, numba retries)."""
    if not isinstance(name, types.StringLiteral):
        return None
    return COMPONENTS[name.literal_value]


# The callers: one per parameter list (numba inlines no call with *args). In Python, the plain call.
def call_batch(name, st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    """The batch schedule ``name``: ``(batch length, next epoch position)``, indices into ``idx``."""
    return COMPONENTS[name](st, perm, n_data, batch_size, pos, idx)


@overload(call_batch, inline="always")
def _call_batch(name, st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
    fn = _chosen(name)
    if fn is None:
        return None

    def impl(name, st, perm, n_data, batch_size, pos, idx):  # type: ignore[no-untyped-def]
        return fn(st, perm, n_data, batch_size, pos, idx)
    return impl


def call_rule(name, grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    """The step rule ``name`` with the gradient oracle ``grad`` (a name); returns the clipped coordinates."""
    return COMPONENTS[name](grad, c, th, m, st, nb, s, ora, p, mc, w)


@overload(call_rule, inline="always")
def _call_rule(name, grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
    fn = _chosen(name)
    if fn is None:
        return None

    def impl(name, grad, c, th, m, st, nb, s, ora, p, mc, w):  # type: ignore[no-untyped-def]
        return fn(grad, c, th, m, st, nb, s, ora, p, mc, w)
    return impl


def call_grad(name, th, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    """The gradient oracle ``name`` reading the :class:`~sgtune.sampler.state.Oracle` ``ora``: its data term on
    the batch ``idx[:nb]`` into ``grad``."""
    return COMPONENTS[name](th, ora, idx, nb, st, work, grad)


@overload(call_grad, inline="always")
def _call_grad(name, th, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
    fn = _chosen(name)
    if fn is None:
        return None

    def impl(name, th, ora, idx, nb, st, work, grad):  # type: ignore[no-untyped-def]
        return fn(th, ora, idx, nb, st, work, grad)
    return impl


def call_value_grad(name, th, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
    """The value-and-gradient oracle ``name``: the data term into ``grad``, the batch-mean loss when ``want``."""
    return COMPONENTS[name](th, ora, idx, nb, st, work, grad, want)


@overload(call_value_grad, inline="always")
def _call_value_grad(name, th, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
    fn = _chosen(name)
    if fn is None:
        return None

    def impl(name, th, ora, idx, nb, st, work, grad, want):  # type: ignore[no-untyped-def]
        return fn(th, ora, idx, nb, st, work, grad, want)
    return impl


def call_move(name, th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    """The update move ``name`` (θ and m from a given gradient); returns the clipped coordinates."""
    return COMPONENTS[name](th, m, grad, st, s, rs, p, ld, fd, xi, buf)


@overload(call_move, inline="always")
def _call_move(name, th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
    fn = _chosen(name)
    if fn is None:
        return None

    def impl(name, th, m, grad, st, s, rs, p, ld, fd, xi, buf):  # type: ignore[no-untyped-def]
        return fn(th, m, grad, st, s, rs, p, ld, fd, xi, buf)
    return impl
