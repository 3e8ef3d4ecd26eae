import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh seeded generator per test (numpyro style)."""
    return np.random.default_rng(20261122)


@pytest.fixture
def one_torch_thread():
    """PyTorch on one intra-op thread for the test (restored after): per-sample work on small arrays, where
    intra-op threads only add contention on a shared 2-core machine. Torch test modules use it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    torch = pytest.importorskip("torch")  # in the [dev] extra: never skipped in the test environment
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
