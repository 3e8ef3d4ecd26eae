import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh seeded generator per test (numpyro style)."""
    return np.random.default_rng(20261122)
