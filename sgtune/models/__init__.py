"""Models: the protocol (:mod:`~sgtune.models.base`), its implementations, fitting and the expansion.

- :mod:`sgtune.models.base` — the per-observation model protocol the theory and the sampler consume;
- :mod:`sgtune.models.glm` — generalised linear models (rank-one J_n = w_n x_n x_nᵀ);
- :mod:`sgtune.models.multinomial` — multinomial logistic regression (block J_n = W_n ⊗ x_n x_nᵀ);
- :mod:`sgtune.models.mlp` — feed-forward networks (exact or Gauss–Newton curvature);
- :mod:`sgtune.models.user` — loading a user's model from ``file.py:NAME``;
- :mod:`sgtune.models.autodiff` — a model from a JAX log-likelihood (extra ``[jax]``);
- :mod:`sgtune.models.pytorch` — a model from a PyTorch ``nn.Module`` and a likelihood (extra ``[torch]``);
- :mod:`sgtune.models.lastlayer` — the output layer of a trained network on its frozen features (a GLM);
- :mod:`sgtune.models.expansion` — MAP fit and the expansion at θ̂ (g_n, J_n, H, J, 𝓘, ḡ).
"""
from __future__ import annotations

from .base import (BlockCurvature, DenseCurvature, ModelError, PerSampleModel, RankOneCurvature, checked_call,
                   model_dim, model_label, per_sample_curvature)
from .expansion import DENSE_HESSIAN_BUDGET, Expansion, FitResult, expand, expansion_at, fit_map, prior_matrix
from .glm import GLM, GLM_IDS, MODEL_NAMES, get_model
from .mlp import MLP, make_mlp
from .lastlayer import LastLayerModel, last_layer  # imports torch only for a torch network
from .multinomial import Multinomial
from .pytorch import TorchModel, from_torch  # imports torch only when a model is built

__all__ = ["PerSampleModel", "RankOneCurvature", "BlockCurvature", "DenseCurvature", "ModelError", "checked_call",
           "model_dim", "model_label", "per_sample_curvature", "GLM", "GLM_IDS", "MODEL_NAMES", "get_model", "FitResult",
           "fit_map", "Expansion", "expand", "expansion_at", "prior_matrix", "DENSE_HESSIAN_BUDGET", "MLP", "make_mlp",
           "Multinomial", "from_torch", "TorchModel", "last_layer", "LastLayerModel"]
