"""The per-layer heavy-ball chain's decoupled 2×2-mode solve against sgtune's dense LinearChain."""
import math

import numpy as np
import pytest

from sgtune.core.config import Dynamics
from sgtune.theory.kronecker import layer_stationary
from sgtune.theory.linear_chain import LinearChain


@pytest.mark.parametrize("kappa,beta", [(0.5, 400.0), (0.9, math.inf), (0.2, 50.0)])
def test_momentum_stationary_equals_the_dense_chain(rng, kappa, beta):
    d = 7
    X = rng.normal(size=(40, d))
    G = X.T @ X / 40 + 0.1 * np.eye(d)
    Y = rng.normal(size=(40, d))
    E = Y.T @ Y / 40
    Z = rng.normal(size=(d, d))
    M = 0.05 * (Z @ Z.T / d + np.eye(d))
    dyn = Dynamics(None, batch_size=10, inv_temperature=beta, momentum=kappa, batching="without-replacement")
    S, rho, tau = layer_stationary(G, E, M, dyn, 200)
    f = (200 - 10) / (200 - 1)
    chain = LinearChain.with_constant_noise(dyn.replace(step=M), G, E, noise_scale=f / 10)
    ref = chain.solve_constant_noise()
    assert np.linalg.norm(S - ref) / np.linalg.norm(ref) < 1e-10
    assert rho == pytest.approx(np.max(np.abs(np.linalg.eigvals(chain.transition))) ** 2, rel=1e-10)
    assert tau == pytest.approx(chain.autocorrelation_times(ref)[1], rel=1e-8)
