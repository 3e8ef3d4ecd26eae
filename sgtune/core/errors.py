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

    ``remedies`` (keyword): :class:`~sgtune.core.reasons.Remedy` objects — computed ways out, in the
    Python API's parameter names (the command line renders each as the command that applies it).
    ``code`` (keyword): the stable code of the cause (:data:`sgtune.core.reasons.CODES`), when it has one.
    """

    def __init__(self, *args: object, remedies: tuple = (), code: str | None = None) -> None:
        super().__init__(*args)
        self.remedies = tuple(remedies)
        self.code = code


class ShapeError(SgtuneError, ValueError):
    """An array has the wrong shape for the argument it was passed as."""


class NotPositiveDefiniteError(SgtuneError, ValueError):
    """A matrix that must be symmetric positive definite is not."""


class UnstableStepSizeError(SgtuneError, ValueError):
    """The step size makes the chain's second moments diverge.

    Attributes
    ----------
    spectral_radius : float
        Spectral radius of the second-moment map (>= 1 when unstable).
    max_stable_step : float
        Largest stable scalar multiplier of the step size (``nan`` if unknown).
    """

    def __init__(self, message: str, *, spectral_radius: float = float("nan"),
                 max_stable_step: float = float("nan"), remedies: tuple = (), code: str | None = None) -> None:
        super().__init__(message, remedies=remedies, code=code)
        self.spectral_radius = spectral_radius
        self.max_stable_step = max_stable_step


class InfeasibleTargetError(SgtuneError, ValueError):
    """No step-size matrix reaches the target covariance (e.g. SGLD too hot).

    Attributes
    ----------
    min_inv_temperature : float
        Smallest inverse temperature for which the target becomes feasible.
    """

    def __init__(self, message: str, *, min_inv_temperature: float = float("nan"), remedies: tuple = (),
                 code: str | None = "unreachable-target") -> None:
        super().__init__(message, remedies=remedies, code=code)
        self.min_inv_temperature = min_inv_temperature


class ConvergenceError(SgtuneError, RuntimeError):
    """An iterative solve or fit did not converge.

    Attributes
    ----------
    residual : float
        Last relative residual (or gradient norm for fits).
    method : str
        Name of the method that failed.
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

    Attributes
    ----------
    needed : int
        Estimated peak bytes.
    available : int
        Bytes available when the estimate was made.
    """

    def __init__(self, message: str, *, needed: int = 0, available: int = 0) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available


class AccuracyWarning(UserWarning):
    """A result is usable but less accurate than sgtune normally guarantees."""
