"""Exception hierarchy of sgtune.

Every error subclasses both :class:`SgtuneError` and the builtin that fits, so
``except ValueError`` keeps working for callers that do not know sgtune. Each
message says what is wrong, shows the value, and says how to fix it.
"""
from __future__ import annotations

__all__ = [
    "SgtuneError",
    "ShapeError",
    "NotPositiveDefiniteError",
    "UnstableStepSizeError",
    "InfeasibleTargetError",
    "ConvergenceError",
    "DataFormatError",
    "MissingExtraError",
    "InsufficientMemoryError",
    "AccuracyWarning",
]


class SgtuneError(Exception):
    """Base class of every error sgtune raises on purpose.

    Each subclass also derives from the builtin that fits (``ValueError``, ``ArithmeticError``, …),
    so ``except ValueError`` keeps working; ``except SgtuneError`` catches every deliberate error.

    See Also
    --------
    AccuracyWarning : A result sgtune cannot vouch for (a warning, not an error).
    """


class ShapeError(SgtuneError, ValueError):
    """An array has the wrong shape for the argument it was passed as."""


class NotPositiveDefiniteError(SgtuneError, ValueError):
    """A matrix that must be symmetric positive definite is not."""


class UnstableStepSizeError(SgtuneError, ValueError):
    """The step size makes the chain's second moments diverge.

    Parameters
    ----------
    message : str
        What is wrong and how to fix it.
    spectral_radius : float, optional
        Spectral radius of the second-moment map (>= 1 when unstable).
    max_stable_step : float, optional
        Largest stable scalar multiplier of the step size (``nan`` if unknown).

    Attributes
    ----------
    spectral_radius : float
        As given.
    max_stable_step : float
        As given.
    """

    def __init__(self, message: str, *, spectral_radius: float = float("nan"),
                 max_stable_step: float = float("nan")) -> None:
        super().__init__(message)
        self.spectral_radius = spectral_radius
        self.max_stable_step = max_stable_step


class InfeasibleTargetError(SgtuneError, ValueError):
    """No step-size matrix reaches the target covariance (e.g. SGLD too hot).

    Parameters
    ----------
    message : str
        What is wrong and how to fix it.
    min_inv_temperature : float, optional
        Smallest inverse temperature for which the target becomes feasible.

    Attributes
    ----------
    min_inv_temperature : float
        As given.
    """

    def __init__(self, message: str, *, min_inv_temperature: float = float("nan")) -> None:
        super().__init__(message)
        self.min_inv_temperature = min_inv_temperature


class ConvergenceError(SgtuneError, RuntimeError):
    """An iterative solve or fit did not converge.

    Parameters
    ----------
    message : str
        What did not converge and what to try.
    residual : float, optional
        Last relative residual (or gradient norm for fits).
    method : str, optional
        Name of the method that failed.

    Attributes
    ----------
    residual : float
        As given.
    method : str
        As given.
    """

    def __init__(self, message: str, *, residual: float = float("nan"), method: str = "") -> None:
        super().__init__(message)
        self.residual = residual
        self.method = method


class DataFormatError(SgtuneError, ValueError):
    """A data file or array does not follow the documented format."""


class MissingExtraError(SgtuneError, ImportError):
    """An optional dependency is needed: the message names the ``pip install`` extra."""


class InsufficientMemoryError(SgtuneError, MemoryError):
    """A computation would need more memory than the machine has available; refused before allocating.

    Parameters
    ----------
    message : str
        Both numbers and the setting to lower.
    needed : int, optional
        Estimated peak bytes.
    available : int, optional
        Bytes available when the estimate was made.

    Attributes
    ----------
    needed, available : int
        As given.
    """

    def __init__(self, message: str, *, needed: int = 0, available: int = 0) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available


class AccuracyWarning(UserWarning):
    """A result is usable but less accurate than sgtune normally guarantees."""
