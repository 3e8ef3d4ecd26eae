"""Citation registry: ``@cites(key, where)`` records which paper equation a function implements.

Keys (see README, "References"):

- ``wang2026`` — Wang, Ding & Huggins, *Accurate Large-sample Uncertainty Quantification
  using Stochastic Gradient MCMC* (Wang, Ding & Huggins (2026)).
- ``gnld2025`` — *Variance Reduction for SG Generalized Non-reversible Langevin Monte
  Carlo* (the GNLD paper (2025)).
- ``mensch2025`` — Mensch et al., *Robust SG Posterior Sampling with Lattice Based
  Discretisation* (Mensch et al. (2025)).
- ``shaw2025`` — Shaw & Whalley, *Random Reshuffling for SGLD* (Shaw & Whalley (2025)).
- ``smile2025`` — *Can Microcanonical Langevin Dynamics Leverage Mini-batch Gradient
  Noise?* (the SMILE paper (2025)).
- ``gorham2017`` — Gorham & Mackey, *Measuring Sample Quality with Kernels* (ICML 2017): the
  kernel Stein discrepancy with the IMQ kernel.
- ``martens2015`` — Martens & Grosse, *Optimizing Neural Networks with Kronecker-factored
  Approximate Curvature* (ICML 2015): KFAC factors and factored Tikhonov damping.
- ``ritter2018`` — Ritter, Botev & Barber, *A Scalable Laplace Approximation for Neural Networks*
  (ICLR 2018): the Kronecker-factored Laplace posterior (laplace-torch's ``KronLaplace``).
"""
from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable[..., object])

REFERENCES: dict[str, str] = {
    "wang2026": "Wang, Ding & Huggins, Accurate Large-sample Uncertainty Quantification using "
                "Stochastic Gradient MCMC (ICML 2026)",
    "gnld2025": "Variance Reduction for Stochastic Gradient Generalized Non-reversible Langevin "
                "Monte Carlo Algorithms",
    "mensch2025": "Mensch, Holdijk, Duffield, Aifer, Coles, Welling & Cheng, Robust Stochastic "
                  "Gradient Posterior Sampling with Lattice Based Discretisation",
    "shaw2025": "Shaw & Whalley, Random Reshuffling for Stochastic Gradient Langevin Dynamics",
    "smile2025": "Can Microcanonical Langevin Dynamics Leverage Mini-batch Gradient Noise?",
    "gorham2017": "Gorham & Mackey, Measuring Sample Quality with Kernels (ICML 2017), "
                  "arXiv:1703.01717",
    "martens2015": "Martens & Grosse, Optimizing Neural Networks with Kronecker-factored Approximate "
                   "Curvature (ICML 2015), arXiv:1503.05671",
    "ritter2018": "Ritter, Botev & Barber, A Scalable Laplace Approximation for Neural Networks (ICLR 2018)",
    "sgtune": "derived in sgtune (see the function's docstring)",
}

#: qualified function name -> list of (key, where)
REGISTRY: dict[str, list[tuple[str, str]]] = {}


def cites(key: str, where: str) -> Callable[[F], F]:
    """Register that the decorated function implements ``where`` of reference ``key``."""
    if key not in REFERENCES:
        raise KeyError(f"unknown reference key {key!r}; add it to sgtune.core._refs.REFERENCES")

    def deco(fn: F) -> F:
        name = f"{fn.__module__}.{fn.__qualname__}"
        REGISTRY.setdefault(name, []).append((key, where))
        refs = getattr(fn, "__references__", [])
        fn.__references__ = [*refs, (key, where)]  # type: ignore[attr-defined]
        return fn

    return deco


def references_of(fn: Callable[..., object]) -> list[str]:
    """Human-readable ``"key: where"`` strings for a registered function."""
    return [f"{k}: {w}" for k, w in getattr(fn, "__references__", [])]
