"""Layer 1: getting numbers in and out.

- :mod:`sgtune.io.data` — data sets from CSV/NPY/NPZ/Parquet/folders, in memory or out of core;
- :mod:`sgtune.io.reduce` — chunked passes over data (serial, threads, Dask) and grid sweeps;
- :mod:`sgtune.io.blocks` — index blocks of the ``block`` step-size family;
- :mod:`sgtune.io.trace_io` — chain traces to NetCDF / ArviZ;
- :mod:`sgtune.io.export` — Λ back into a training loop (NumPy step, optax transform);
- :mod:`sgtune.io.plots` — the figures behind ``--plot`` (extra ``[plot]``).
"""
