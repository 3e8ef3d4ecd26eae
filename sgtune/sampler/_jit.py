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

Cache invalidation: numba's on-disk cache is keyed by a hash of the source file of the
compiled function only, so a kernel that inlines helpers from another module (``kernels``
uses ``rng`` and ``grads``) would silently keep stale machine code when only the helper's
file changes. The locators registered below give every function defined in
``sgtune/sampler/`` a stamp that hashes its own file and the :data:`CORE_MODULES`
(``_jit``, ``rng``, ``grads``, ``kernels``, ``targets``, ``smile``, ``state``) instead: editing a core module recompiles the
package's kernels once; editing any other file only recompiles that file's functions, as
before. A new module whose helpers are inlined elsewhere belongs in :data:`CORE_MODULES`.
(If a future numba renames its locator classes, the registration is skipped and the
per-file behaviour returns: then delete ``sgtune/sampler/__pycache__/*.nb[ic]`` or
``$NUMBA_CACHE_DIR`` after editing a helper.)

Inlined helpers (``njit_inline``, :func:`component_inline`): every call of a compiled function that is
not inlined passes each array argument's reference count through an atomic increment and decrement
(numba's NRT, about 36 atomic operations for the 18 arrays of an engine step rule), and LLVM does not
inline a callee whose body holds many such calls. The engine's small helpers (the moves, the gradient
with its prior, the recorder, the MCLMC integrator's phases) are therefore inlined into their caller in
numba's IR (``inline="always"``), before LLVM sees them: the same arithmetic in the same order (no
fastmath), so the same bits, without the calls. A component declared with :func:`component_inline` is
inlined where it is called by name and still compiles as a function where it is passed as an argument.
Measured in ``benchmarks/bench_engine_ab.py``.

Composed kernels and the cache (:func:`component`): a kernel that takes jitted functions as
arguments (numba first-class functions, one specialisation per combination) is keyed in the
on-disk index by its argument *types*, and the type of a dispatcher argument pickles as the
dispatcher's uuid — a random ``uuid4`` per process, so every process would miss the cache and
append a new entry. :func:`component` gives a sampler component a stable uuid built from its
qualified name and the :func:`package_stamp` of its file, so the index key is the same in every
process (cache hits) and changes when the component's source or a core module changes (no stale
machine code). A jitted function passed in that is not a component (e.g. a user's ``@njit``
gradient) still works, but is compiled afresh in every process.

No writable cache (a read-only install, ``docker run --user``, an unwritable ``NUMBA_CACHE_DIR`` and
home directory): numba would refuse to define the kernels ("cannot cache function …"). Then
:func:`ensure_cache_location` points numba at a per-user folder in the system's temporary directory
(``sgtune-numba-cache-<uid>``, mode 0700, used only when this user owns it; otherwise a fresh one
removed at exit), and with no writable temporary directory either, compiles without a cache.

Only ``sgtune/sampler/`` imports numba.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import stat
import tempfile

import numba

__all__ = ["njit", "njit_fma", "njit_inline", "component", "component_fma",
           "component_inline", "inline_caller", "NJIT_OPTIONS",
           "NJIT_FMA_OPTIONS", "get_num_threads", "set_num_threads",
           "package_stamp", "CORE_MODULES", "ensure_cache_location"]

NJIT_OPTIONS: dict[str, object] = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}
#: NJIT_OPTIONS with FMA contraction only (module docstring)
NJIT_FMA_OPTIONS: dict[str, object] = {**NJIT_OPTIONS, "fastmath": {"contract"}}

_SAMPLER_DIR = os.path.dirname(os.path.abspath(__file__))


#: modules whose numba helpers other sampler modules inline; a change in any of them must
#: invalidate every cached function of the package
CORE_MODULES = ("_jit.py", "rng.py", "grads.py", "kernels.py", "targets.py", "smile.py", "state.py")


@functools.lru_cache(maxsize=64)
def _hash_files(stats: tuple[tuple[str, int, int], ...]) -> bytes:
    h = hashlib.sha256()
    for path, _mtime, _size in stats:
        with open(path, "rb") as fh:
            h.update(os.path.basename(path).encode())
            h.update(fh.read())
    return h.digest()


def package_stamp(py_file: str) -> bytes:
    """SHA-256 over the source of ``py_file`` and of the :data:`CORE_MODULES` (names and contents).

    Memoised on the files' modification times and sizes (like numba's own per-file hash).
    """
    paths = sorted({os.path.abspath(py_file), *(os.path.join(_SAMPLER_DIR, m) for m in CORE_MODULES)})
    stats = []
    for p in paths:
        st = os.stat(p)
        stats.append((p, st.st_mtime_ns, st.st_size))
    return _hash_files(tuple(stats))


def _in_package(py_file: str) -> bool:
    return os.path.dirname(os.path.abspath(py_file)) == _SAMPLER_DIR


try:
    from numba.core import caching as _caching

    class _PackageUserDirLocator(_caching.UserProvidedCacheLocator):  # type: ignore[misc,name-defined]
        """``$NUMBA_CACHE_DIR`` locator with the package-wide stamp (sampler files only)."""

        def get_source_stamp(self):  # type: ignore[no-untyped-def]
            return package_stamp(self._py_file)

        @classmethod
        def from_function(cls, py_func, py_file):  # type: ignore[no-untyped-def]
            return super().from_function(py_func, py_file) if _in_package(py_file) else None

    class _PackageInTreeLocator(_caching.InTreeCacheLocator):  # type: ignore[misc,name-defined]
        """``__pycache__`` locator with the package-wide stamp (sampler files only)."""

        def get_source_stamp(self):  # type: ignore[no-untyped-def]
            return package_stamp(self._py_file)

        @classmethod
        def from_function(cls, py_func, py_file):  # type: ignore[no-untyped-def]
            return super().from_function(py_func, py_file) if _in_package(py_file) else None

    class _PackageUserWideLocator(_caching.UserWideCacheLocator):  # type: ignore[misc,name-defined]
        """Per-user cache directory (read-only installs) with the package-wide stamp."""

        def get_source_stamp(self):  # type: ignore[no-untyped-def]
            return package_stamp(self._py_file)

        @classmethod
        def from_function(cls, py_func, py_file):  # type: ignore[no-untyped-def]
            return super().from_function(py_func, py_file) if _in_package(py_file) else None

    _locators = _caching.CacheImpl._locator_classes
    if _PackageInTreeLocator.__name__ not in {c.__name__ for c in _locators}:
        _locators[:0] = [_PackageUserDirLocator, _PackageInTreeLocator, _PackageUserWideLocator]
except (ImportError, AttributeError):  # pragma: no cover - numba internals changed
    pass

def _probe() -> None:  # pragma: no cover - never called: the function numba's locators are asked about
    return None


def cache_location_found(py_file: str = __file__) -> bool:
    """Would numba find a writable cache folder for a function defined in ``py_file``?"""
    try:
        classes = _caching.CacheImpl._locator_classes
    except (NameError, AttributeError):  # pragma: no cover - numba internals changed: let numba decide
        return True
    for cls in classes:
        try:
            if cls.from_function(_probe, py_file) is not None:
                return True
        except OSError:
            continue
    return False


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
    (then the kernels are compiled without a cache)."""
    if cache_location_found():
        return True
    folder = _fallback_cache_dir()
    if folder is not None:
        os.environ["NUMBA_CACHE_DIR"] = folder  # numba re-reads its configuration from the environment
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


def component(fn, _jit=njit):  # type: ignore[no-untyped-def]
    """``njit`` with a stable dispatcher uuid, for functions passed to composed kernels (module docstring).

    Relies on numba's private ``Dispatcher._set_uuid`` (present since numba 0.4x); without it the
    component still works and only the cross-process cache hits are lost.
    """
    disp = _jit(fn)
    stamp = package_stamp(fn.__code__.co_filename).hex()[:16]
    try:
        disp._set_uuid(f"sgtune.sampler:{fn.__module__}.{fn.__qualname__}:{stamp}")
    except (AttributeError, AssertionError):  # pragma: no cover - numba internals changed
        pass
    return disp


def component_fma(fn):  # type: ignore[no-untyped-def]
    """:func:`component` compiled with ``njit_fma`` (FMA contraction, module docstring)."""
    return component(fn, njit_fma)


def component_inline(fn):  # type: ignore[no-untyped-def]
    """:func:`component` inlined where it is called by name (module docstring, "Inlined helpers")."""
    return component(fn, njit_inline)


def inline_caller(name: str, params: str):  # type: ignore[no-untyped-def]
    """``name(fn, <params>)``: calls the component ``fn`` (passed as an argument) with ``<params>``, inlined.

    A compiled function that calls a component it was given as an argument calls it as a function; one that
    calls it through this caller gets the component's body inlined in numba's IR when the component is a
    :func:`component_inline` (module docstring, "Inlined helpers"), and an ordinary call otherwise (e.g. the
    FMA-compiled MLP gradient, whose flags differ from its caller's). numba cannot inline a call with
    ``*args``, hence one caller per parameter list (the source of the caller and of its compiled twin is
    generated from ``params``). In Python (the reference implementation) it is ``fn(<params>)``.

    >>> call2 = inline_caller("call2", "a, b")
    >>> call2(max, 3, 4)
    4
    """
    from numba import types
    from numba.extending import overload

    src = f"def {name}(fn, {params}):\n    return fn({params})\n"
    scope: dict[str, object] = {}
    exec(src, scope)  # noqa: S102 - fixed template, parameter names from the package's own call sites
    stub = scope[name]
    stub.__module__ = __name__
    stub.__doc__ = f"``fn({params})``, with ``fn``'s body inlined when compiled (:func:`inline_caller`)."

    def implementation(fn):  # type: ignore[no-untyped-def]
        if not isinstance(fn, types.Dispatcher):  # e.g. a first-class function type: a plain call
            return stub
        impl: dict[str, object] = {"target": fn.dispatcher}
        exec(f"def impl(fn, {params}):\n    return target({params})\n", impl)  # noqa: S102 - as above
        return impl["impl"]

    typer: dict[str, object] = {"implementation": implementation}
    exec(f"def typer(fn, {params}):\n    return implementation(fn)\n", typer)  # noqa: S102 - as above
    overload(stub, inline="always")(typer["typer"])
    return stub
