"""Chunked, deterministic reductions over the rows of a data set: serial or on a Dask cluster.

Every O(N·D²) data reduction of sgtune (the MAP fit's Newton passes, the expansion's J, 𝓘, ḡ,
the noise term C̄(Σ) = mean_n J_nΣJ_n) is a sum over rows. :func:`reduce_rows` computes it
from a :class:`RowSource` — arrays in memory, or ``.npy`` files read by explicit file reads
(never through a memory map, so touched pages do not count in the process's RSS) — in
fixed chunks of ``chunk_rows`` rows.

Memory bound: O(chunk_rows·D + D²) per process (one chunk and its per-row intermediates,
plus the partial sums), independent of N.

Determinism: chunk boundaries are fixed (multiples of ``chunk_rows`` from row 0, whatever the
file layout or Parquet row groups), each chunk's partial sum is computed by the same NumPy
code, chunks are combined by a left fold inside groups of :data:`GROUP_CHUNKS` consecutive
chunks, and the group sums by a left fold in group order. The Dask backend runs one task per
group and folds the gathered group sums in the same order, so serial and Dask results are
the same bits whenever BLAS gives the same bits for the same chunk (it does here:
OpenBLAS splits a matrix product over output blocks, not over the summed dimension).
"""
from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..core.errors import DataFormatError, SgtuneError

__all__ = ["CHUNK_ROWS", "GROUP_CHUNKS", "NpyFile", "RowSource", "chunk_bounds", "reduce_rows",
           "map_tasks", "map_grid", "task_seeds", "SchedulerError", "pass_counts",
           "reset_pass_counts", "blas_single_thread"]

#: rows per chunk (fixed: results depend on the chunk boundaries at rounding level only through it)
CHUNK_ROWS = 65536
#: chunks per group; a Dask task reduces one group
GROUP_CHUNKS = 8


class SchedulerError(SgtuneError):
    """A Dask scheduler could not be reached or used (or dask is not installed)."""


@dataclass(frozen=True)
class NpyFile:
    """A C-order float64 array stored in a ``.npy`` file, read by explicit reads (no memory map).

    Attributes
    ----------
    path : str
        The file.
    offset : int
        The byte offset of the data (after the .npy header).
    shape : tuple of int
        The array's shape.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "X.npy")
    ...     np.save(path, np.arange(6.0).reshape(3, 2))
    ...     f = NpyFile.open(path, "X")
    ...     rows = f.read_rows(1, 3)
    >>> f.shape, rows
    ((3, 2), array([[2., 3.],
           [4., 5.]]))
    """

    path: str
    offset: int
    shape: tuple[int, ...]

    @classmethod
    def open(cls, path: str | os.PathLike[str], name: str) -> "NpyFile":
        """Read the header of ``path``; refuse anything but little-endian float64 in C order."""
        try:
            with open(path, "rb") as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                offset = fh.tell()
        except FileNotFoundError:
            raise DataFormatError(f"{path}: {name} file does not exist") from None
        except (OSError, ValueError) as exc:
            raise DataFormatError(f"{path}: cannot read as .npy ({exc})") from None
        if dtype != np.dtype("<f8") or fortran:
            raise DataFormatError(
                f"{path}: {name} must be a C-order float64 array to be read out of core, got dtype {dtype}"
                f"{' (Fortran order)' if fortran else ''}; save it with np.save(path, np.ascontiguousarray(a, "
                "dtype=np.float64))")
        size = os.path.getsize(path)
        need = offset + 8 * int(np.prod(shape, dtype=np.int64))
        if size < need:
            raise DataFormatError(f"{path}: {name} is truncated ({size} bytes, the header promises {need})")
        return cls(str(path), int(offset), tuple(int(s) for s in shape))

    @property
    def row_size(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as a fresh float64 array (one ``np.fromfile`` at the right offset)."""
        k = self.row_size
        out = np.fromfile(self.path, dtype="<f8", count=(stop - start) * k, offset=self.offset + 8 * start * k)
        if out.shape[0] != (stop - start) * k:
            raise DataFormatError(f"{self.path}: short read at rows [{start}, {stop}); the file changed?")
        return out.reshape((stop - start, *self.shape[1:]))

    def read_index(self, index: np.ndarray) -> np.ndarray:
        """The rows at sorted positions ``index`` (one open file, a seek and a read per row)."""
        k = self.row_size
        out = np.empty((len(index), k))
        with open(self.path, "rb") as fh:
            for i, r in enumerate(index):
                fh.seek(self.offset + 8 * int(r) * k)
                if fh.readinto(memoryview(out[i])) != 8 * k:
                    raise DataFormatError(f"{self.path}: short read at row {int(r)}; the file changed?")
        return out.reshape((len(index), *self.shape[1:]))

    def memmap(self) -> np.ndarray:
        """The whole array as a copy-on-write memory map (for row gathers, e.g. the sampler's minibatches).

        Copy-on-write, not read-only: the file is never modified, and numba sees the same (writable)
        array type as for in-memory data, so the sampler's compiled code is reused, not recompiled.
        """
        return np.memmap(self.path, dtype="<f8", mode="c", offset=self.offset, shape=self.shape)


@dataclass(frozen=True)
class RowSource:
    """Rows (X, y) of a data set, in memory or in .npy files; picklable (cheap when file-backed).

    Attributes
    ----------
    X : NpyFile or ndarray
        The (N, p) covariates.
    y : NpyFile or ndarray
        The N responses (or rows of responses).

    Examples
    --------
    >>> src = RowSource(np.arange(6.0).reshape(3, 2), np.arange(3.0))
    >>> src.n_rows, src.file_backed, src.read(1, 2)
    (3, False, (array([[2., 3.]]), array([1.])))
    """

    X: NpyFile | np.ndarray
    y: NpyFile | np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_cols(self) -> int:
        return int(self.X.shape[1])

    @property
    def file_backed(self) -> bool:
        return isinstance(self.X, NpyFile)

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(X[start:stop], y[start:stop]) as float64 arrays."""
        X = self.X.read_rows(start, stop) if isinstance(self.X, NpyFile) else self.X[start:stop]
        y = self.y.read_rows(start, stop) if isinstance(self.y, NpyFile) else self.y[start:stop]
        return X, y

    def read_index(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(X[index], y[index]) for sorted row positions, as fresh arrays."""
        X = self.X.read_index(index) if isinstance(self.X, NpyFile) else self.X[index]
        y = self.y.read_index(index) if isinstance(self.y, NpyFile) else self.y[index]
        return np.array(X), np.array(y)


def chunk_bounds(n_rows: int, chunk_rows: int = CHUNK_ROWS) -> list[tuple[int, int]]:
    """Return the fixed chunk boundaries [(0, c), (c, 2c), …, (kc, N)].

    Parameters
    ----------
    n_rows : int
        The number of rows N.
    chunk_rows : int, optional
        The rows per chunk c ≥ 1.

    Returns
    -------
    list of (int, int)
        The [start, stop) of each chunk.

    Raises
    ------
    SgtuneError
        If c < 1.

    Examples
    --------
    >>> chunk_bounds(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    if chunk_rows < 1:
        raise SgtuneError(f"chunk_rows must be >= 1, got {chunk_rows}")
    return [(a, min(a + chunk_rows, n_rows)) for a in range(0, n_rows, chunk_rows)]


Partial = tuple[np.ndarray, ...]


def _fold(parts: Sequence[Partial]) -> Partial:
    acc = tuple(np.array(p, dtype=float, copy=True) for p in parts[0])
    for part in parts[1:]:
        for a, p in zip(acc, part):
            a += p
    return acc


def _reduce_group(fn: Callable[..., Partial], source: RowSource, bounds: Sequence[tuple[int, int]],
                  args: tuple[Any, ...]) -> Partial:
    """Left fold of fn over the chunks of one group (the unit of work of a Dask task)."""
    acc: Partial | None = None
    for a, b in bounds:
        X, y = source.read(a, b)
        part = tuple(np.asarray(p, dtype=float) for p in fn(X, y, *args))
        acc = part if acc is None else _fold([acc, part])
    assert acc is not None
    return acc


_PASSES: dict[str, int] = {}
_PASS_LOCK = threading.Lock()


def pass_counts() -> dict[str, int]:
    """Return the passes over out-of-core rows made by :func:`reduce_rows` in this process.

    In-memory sources are not counted: they are not re-read from disk. For benchmarks and tests
    of the number of data passes a command makes.

    Returns
    -------
    dict of str to int
        The passes, by the name of the chunk function.

    Examples
    --------
    >>> reset_pass_counts()
    >>> pass_counts()
    {}
    """
    with _PASS_LOCK:
        return dict(_PASSES)


def reset_pass_counts() -> None:
    """Zero the counters of :func:`pass_counts`.

    Examples
    --------
    >>> reset_pass_counts()
    >>> pass_counts()
    {}
    """
    with _PASS_LOCK:
        _PASSES.clear()


def reduce_rows(fn: Callable[..., Partial], source: RowSource, *args: Any, chunk_rows: int = CHUNK_ROWS,
                scheduler: str | None = None) -> Partial:
    """Sum ``fn(X_chunk, y_chunk, *args)`` (a tuple of arrays) over fixed row chunks, deterministically.

    See the module docstring for the combination order (the same for every backend). In-memory
    sources are always reduced in this process.

    Parameters
    ----------
    fn : callable
        ``fn(X, y, *args)`` returning a tuple of sums (not means) over the rows it is given; a
        module-level function (it is shipped to Dask workers by reference).
    source : RowSource
        The rows.
    *args
        Passed on to ``fn``.
    chunk_rows : int, optional
        The rows per chunk.
    scheduler : str, optional
        None (this process, one thread per core), ``"serial"`` (this process, one thread),
        ``"local"`` (a local Dask cluster) or a Dask scheduler address.

    Returns
    -------
    tuple of ndarray
        The sums.

    Raises
    ------
    SchedulerError
        If the Dask scheduler cannot be reached (or dask is not installed).

    Examples
    --------
    >>> def col_sums(X, y):
    ...     return X.sum(axis=0), y.sum(keepdims=True)
    >>> src = RowSource(np.arange(10.0).reshape(5, 2), np.ones(5))
    >>> reduce_rows(col_sums, src, chunk_rows=2)
    (array([20., 25.]), array([5.]))
    """
    bounds = chunk_bounds(source.n_rows, chunk_rows)
    if source.file_backed:
        name = getattr(fn, "__name__", "reduction")
        with _PASS_LOCK:
            _PASSES[name] = _PASSES.get(name, 0) + 1
    groups = [bounds[i:i + GROUP_CHUNKS] for i in range(0, len(bounds), GROUP_CHUNKS)]
    if scheduler in (None, "serial") or not source.file_backed:
        sums = _local_groups(fn, source, groups, args, threads=1 if scheduler == "serial" else None)
    else:
        sums = map_tasks(_reduce_group, [(fn, source, g, args) for g in groups], scheduler)
    return _fold(sums)


def n_threads() -> int:
    """Threads of the in-process backend: $SGTUNE_THREADS, else the CPUs this process may use."""
    env = os.environ.get("SGTUNE_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise SgtuneError(f"SGTUNE_THREADS must be a positive integer, got {env!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


def _local_groups(fn: Callable[..., Partial], source: RowSource, groups: list[list[tuple[int, int]]],
                  args: tuple[Any, ...], threads: int | None = None) -> list[Partial]:
    """Group sums in this process: one thread per core over the groups, BLAS single-threaded inside.

    NumPy releases the GIL in file reads, BLAS and ufuncs, so groups run in parallel; each group
    is reduced by single-threaded BLAS (no oversubscription, and the same bits for any number
    of threads: results are collected in group order).
    """
    k = min(n_threads() if threads is None else threads, len(groups))
    if k <= 1 or len(groups) <= 1:
        return [_reduce_group(fn, source, g, args) for g in groups]
    from concurrent.futures import ThreadPoolExecutor

    with blas_single_thread(), ThreadPoolExecutor(max_workers=k) as pool:
        return list(pool.map(lambda g: _reduce_group(fn, source, g, args), groups))


class blas_single_thread:
    """Context manager: BLAS limited to one thread (threadpoolctl when installed, else a no-op).

    For many small products (chunk reductions run in parallel threads; the applicability report's
    D×D and M×D work on a subsample): OpenBLAS's threads cost more than they save there, and on a
    loaded machine their spinning made the report at D = 50 use 25× the CPU time.

    Examples
    --------
    >>> with blas_single_thread():
    ...     float(np.ones((3, 3)).sum())
    9.0
    """

    def __enter__(self) -> "blas_single_thread":
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover (threadpoolctl comes with scikit-learn / the [dask] extra)
            self._ctx = None
            return self
        self._ctx = threadpool_limits(limits=1, user_api="blas")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.restore_original_limits()


# --- Dask -------------------------------------------------------------------------------------

_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()
#: the largest first message (its 8-byte length prefix) a Dask scheduler's handshake can plausibly have: anything
#: larger is another protocol's bytes read as a length (HTTP's "HTTP/1.1" is 3.5·10¹⁸ bytes)
MAX_HANDSHAKE_BYTES = 1 << 24


def _timeout_seconds() -> float:
    """``$SGTUNE_DASK_TIMEOUT`` (default 10 s) in seconds: ``10s``, ``500ms``, ``2``."""
    text = os.environ.get("SGTUNE_DASK_TIMEOUT", "10s").strip().lower()
    for unit, scale in (("ms", 1e-3), ("s", 1.0)):
        if text.endswith(unit):
            text, factor = text[: -len(unit)], scale
            break
    else:
        factor = 1.0
    try:
        value = float(text) * factor
    except ValueError:
        value = 10.0
    return value if value > 0 else 10.0


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``tcp://host:port`` or ``host:port`` address; None for other protocols (tls, ucx, …)."""
    rest = address[len("tcp://"):] if address.startswith("tcp://") else address
    if "://" in rest:
        return None
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def probe_scheduler(address: str, timeout: float) -> None:
    """Check that a Dask scheduler answers at ``address`` before handing it to ``distributed``, whose client
    waits forever on a server that never speaks (an HTTP port) and reads another protocol's first bytes as
    the length of a message (an HTTP 400 reply becomes an allocation of exbibytes). A scheduler greets every
    new connection at once with its handshake, a message whose 8-byte little-endian length comes first; this
    opens a connection, waits up to ``timeout`` seconds for those 8 bytes and checks them.

    Parameters
    ----------
    address : str
        ``tcp://host:port`` or ``host:port`` (other protocols are not probed).
    timeout : float
        Seconds to wait for the connection and then for the greeting.

    Raises
    ------
    SchedulerError
        Nothing listens, nothing answers within ``timeout``, or what answers is not a Dask scheduler.
    """
    import socket
    import struct

    hp = _host_port(address)
    if hp is None:
        return
    where = f"`scheduler={address}`"
    try:
        sock = socket.create_connection(hp, timeout=timeout)
    except OSError as exc:
        raise SchedulerError(f"{where}: cannot connect to the Dask scheduler ({exc.strerror or exc}); give 'local' "
                             "or the address of a running scheduler, like tcp://host:8786") from None
    head = b""
    try:
        sock.settimeout(timeout)
        while len(head) < 8:
            part = sock.recv(8 - len(head))
            if not part:
                break
            head += part
    except OSError:  # socket.timeout included
        pass
    finally:
        sock.close()
    if len(head) < 8:
        said = f" (it sent {head[:8]!r} and closed)" if head else f" within {timeout:g} s"
        raise SchedulerError(f"{where}: something listens there but it did not answer as a Dask scheduler{said}; "
                             "check the address (a scheduler listens on port 8786 by default; 8787 is its "
                             "dashboard) or raise SGTUNE_DASK_TIMEOUT")
    (length,) = struct.unpack("<Q", head)
    if head[:5] in (b"HTTP/", b"<!DOC", b"<html") or not 0 < length <= MAX_HANDSHAKE_BYTES:
        what = "an HTTP server (a dashboard or a proxy?)" if head.startswith((b"HTTP/", b"<")) else "not Dask"
        raise SchedulerError(f"{where}: what answers there is {what}, not a Dask scheduler (its first bytes: "
                             f"{head!r}); give the scheduler's own address (port 8786 by default; 8787 is its "
                             "dashboard)")


def get_client(scheduler: str) -> Any:
    """A ``distributed.Client`` for ``scheduler`` (``"local"``: a 2-worker local cluster), cached per process."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SchedulerError(f"`scheduler={scheduler}`: dask is not installed; pip install 'sgtune[dask]'") from None
    with _LOCK:
        client = _CLIENTS.get(scheduler)
        if client is not None and client.status == "running":
            return client
        try:
            if scheduler == "local":
                n = int(os.environ.get("SGTUNE_DASK_WORKERS", "2"))
                # the scheduler's HTTP server on a free port: the default 8787 may belong to another cluster
                # (distributed then warns and moves; a fixed port is of no use to a per-process cluster)
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=50)
                client = Client(cluster)
            else:
                timeout = _timeout_seconds()
                probe_scheduler(scheduler, timeout)
                client = Client(scheduler, timeout=f"{timeout}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise SchedulerError(f"`scheduler={scheduler}`: cannot connect to the Dask scheduler ({exc}); "
                                 "give 'local' or an address like tcp://host:8786") from None
        _CLIENTS[scheduler] = client
        return client


@atexit.register
def _close_clients() -> None:  # pragma: no cover (interpreter exit)
    for client in list(_CLIENTS.values()):
        try:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()
        except Exception:
            pass
    _CLIENTS.clear()


def _call_by_value(blob: bytes, *args: Any) -> Any:
    import cloudpickle

    return cloudpickle.loads(blob)(*args)


def map_tasks(fn: Callable[..., Any], arg_tuples: Sequence[tuple[Any, ...]], scheduler: str | None, *,
              by_value: bool = False) -> list[Any]:
    """Return ``[fn(*a) for a in arg_tuples]``, computed on a Dask cluster unless ``scheduler`` is None/"serial".

    Each task gets everything it needs (seeds included) in its arguments, so the results do
    not depend on where or in which order tasks run.

    Parameters
    ----------
    fn : callable
        The task.
    arg_tuples : sequence of tuple
        The arguments of each task.
    scheduler : str or None
        None or ``"serial"`` (this process), ``"local"`` (a local Dask cluster) or a Dask
        scheduler address.
    by_value : bool, optional
        Ship ``fn`` as cloudpickle bytes (for functions of scripts the workers cannot import;
        register the script's module with ``cloudpickle.register_pickle_by_value`` first unless
        it is ``__main__``).

    Returns
    -------
    list
        The results, in the order of ``arg_tuples``.

    Raises
    ------
    SchedulerError
        If the Dask scheduler cannot be reached (or dask is not installed).

    Examples
    --------
    >>> map_tasks(pow, [(2, 3), (3, 2)], None)
    [8, 9]
    """
    if scheduler in (None, "serial"):
        return [fn(*a) for a in arg_tuples]
    if by_value:
        import cloudpickle

        blob = cloudpickle.dumps(fn)
        arg_tuples = [(blob, *a) for a in arg_tuples]
        fn = _call_by_value
    client = get_client(str(scheduler))
    futures = [client.submit(fn, *a, pure=False) for a in arg_tuples]
    try:
        return client.gather(futures)
    except SgtuneError:
        raise
    finally:
        for f in futures:
            f.release()


def task_seeds(seed: int, n_tasks: int) -> list[int]:
    """Return one independent integer seed per task: ``SeedSequence(seed).spawn(n_tasks)`` (fixed by position).

    Parameters
    ----------
    seed : int
        The root seed.
    n_tasks : int
        The number of tasks.

    Returns
    -------
    list of int
        The seeds, in task order.

    Examples
    --------
    >>> seeds = task_seeds(0, 3)
    >>> len(set(seeds)), seeds == task_seeds(0, 3)
    (3, True)
    """
    return [int(child.generate_state(1, np.uint64)[0] >> np.uint64(1))
            for child in np.random.SeedSequence(int(seed)).spawn(int(n_tasks))]


def _grid_task(fn: Callable[..., Any], point: dict[str, Any], seed: int) -> Any:
    return fn(**point, seed=seed)


def map_grid(fn: Callable[..., Any], grid: Sequence[dict[str, Any]], *, seed: int = 0,
             scheduler: str | None = None) -> list[Any]:
    """Return ``fn(**point, seed=s_i)`` for each grid point, serially or as Dask tasks; identical results either way.

    For sweeps — calibrate repetitions, batch-size or method grids: task i gets the seed
    ``task_seeds(seed, len(grid))[i]``, fixed by its position in the grid, so neither the
    backend nor the order in which workers finish changes any number.

    Parameters
    ----------
    fn : callable
        ``fn(**point, seed=...)``; a module-level function (shipped to workers by reference).
    grid : sequence of dict
        The grid points (keyword arguments of ``fn``).
    seed : int, optional
        The root seed of the tasks' seeds (:func:`task_seeds`).
    scheduler : str, optional
        None or ``"serial"`` (this process), ``"local"`` or a Dask scheduler address.

    Returns
    -------
    list
        The results, in grid order.

    Raises
    ------
    SchedulerError
        If the Dask scheduler cannot be reached (or dask is not installed).

    Examples
    --------
    >>> def draw(scale, seed):
    ...     return round(float(scale * np.random.default_rng(seed).standard_normal()), 6)
    >>> first = map_grid(draw, [{"scale": 1.0}, {"scale": 2.0}], seed=1)
    >>> first == map_grid(draw, [{"scale": 1.0}, {"scale": 2.0}], seed=1), len(first)
    (True, 2)
    """
    seeds = task_seeds(seed, len(grid))
    return map_tasks(_grid_task, [(fn, dict(p), s) for p, s in zip(grid, seeds)], scheduler)
