"""The shared data, model and batch options of the commands, as click declarations.

The one table of these options: commands take them through :data:`data_options` and :data:`batch_options`,
and the project file (:mod:`sgtune.cli._config`) is checked against the same click parameters, so the
command line and ``sgtune.toml`` cannot drift apart. The loaders that turn their values into a problem are
in :mod:`sgtune.cli._options`.
"""
from __future__ import annotations

from typing import Any, Callable

import click

from ..io.data import EXAMPLES
from ..models import MODEL_NAMES

MODEL_HELP = ("Per-observation model: a GLM (" + ", ".join(MODEL_NAMES) + "), 'multinomial' (softmax regression over "
              "the response's class labels, numbers or text: --layout), 'mlp' (a feed-forward network: "
              "--hidden-sizes, --activation, --likelihood), 'last-layer' (the output layer of a trained network on its "
              "frozen features: --features or --features-from, --likelihood), or a user model path/to/file.py:NAME "
              "(NAME is an object implementing sgtune's model protocol; see the README). Default: the example's "
              "model, else required.")
#: --likelihood: the mlp's (gaussian, bernoulli, poisson) and the last layer's (gaussian, bernoulli, softmax)
LIKELIHOODS = ("gaussian", "bernoulli", "poisson", "softmax")


def compose(*decorators: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """One decorator applying ``decorators`` in the order listed (a group of click options)."""
    def deco(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f
    return deco


data_options = compose(
    click.argument("data", required=False, type=click.Path(dir_okay=True)),
    click.option("--example", type=click.Choice(sorted(EXAMPLES)), default=None,
                 help="Use a bundled example data set instead of DATA (e.g. hetero-linear: "
                      "Wang, Ding & Huggins's (2026) heteroskedastic misspecified linear regression, N=2000, D=20)."),
    click.option("--response", default="y", show_default=True, help="CSV column holding the response."),
    click.option("--intercept", is_flag=True, help="Prepend a column of ones to X."),
    click.option("--model", default=None, help=MODEL_HELP),
    click.option("--hidden-sizes", default=None,
                 help="mlp: hidden layer widths from the input, comma-separated (e.g. 16,16; '' for none)."),
    click.option("--activation", type=click.Choice(["tanh", "relu", "softplus"]), default="tanh",
                 show_default=True, help="mlp: hidden-layer activation."),
    click.option("--likelihood", type=click.Choice(LIKELIHOODS), default="gaussian",
                 show_default=True, help="mlp (gaussian, bernoulli, poisson) and last-layer (gaussian, bernoulli, "
                                         "softmax = K classes, the full softmax layout; needs --prior-precision): "
                                         "likelihood of y given the network output f (σ² = --noise-variance)."),
    click.option("--features", default=None, type=click.Path(dir_okay=False), metavar="FILE",
                 help="last-layer: the network's features φ(x), a .npy or .csv of numbers with one row per row of "
                      "DATA (the input of the output layer); DATA gives the response. The head gets a bias column. "
                      "The result describes SGD/SGLD on the head's weights and bias with the body frozen (batches "
                      "are rows of features)."),
    click.option("--features-from", "features_from", default=None, metavar="FILE.py:NAME|mlp",
                 help="last-layer: NAME in FILE.py is the trained network — a torch.nn.Module whose output layer is "
                      "the nn.Linear that gives its output (else its last one; --head NAME names it; its weights "
                      "start the fit; nothing may follow it) — or a function "
                      "features(X) -> (n, d); the features of DATA's covariates are computed once, in float64. "
                      "Or NAME is a network model (sgtune's model protocol with features(theta, X) and "
                      "last_layer_likelihood, which gives the head's --likelihood; a from_torch(net, likelihood) model "
                      "offers them when its output is its last nn.Linear): fitted exactly as --model "
                      "FILE.py:NAME with the same options (a from_torch network: at its current weights unless "
                      "--fit), or at --theta-hat (its D parameters), then the head on its features. "
                      "'mlp': sgtune's own network (--hidden-sizes, --activation, --likelihood gaussian or "
                      "bernoulli, --prior-precision, --seed, --subsample: the fit of --model mlp with the same "
                      "options, or its weights from --theta-hat) — the result describes SGD/SGLD on that network's "
                      "output layer with the body frozen at those weights."),
    click.option("--head", "head", default=None, metavar="NAME",
                 help="last-layer with --features-from FILE.py:NAME (a torch network): the qualified name of the "
                      "output layer, an nn.Linear (e.g. 'out', 'classifier.2'); default: the nn.Linear whose output "
                      "is the network's output, else its last one. A name it lacks lists the network's nn.Linear "
                      "modules."),
    click.option("--layout", type=click.Choice(["baseline", "full"]), default="baseline", show_default=True,
                 help="multinomial: θ's layout. baseline: the smallest label is the reference class (logit 0) and θ "
                      "stacks the K−1 coefficient vectors of the other classes in sorted label order, each of length "
                      "p (intercept first with --intercept); names class[LABEL].COVARIATE. full: K vectors, one per "
                      "class (a network's output layer); identified only through the prior (needs --prior-precision "
                      "> 0), no sandwich target. JSON keys: classes, layout, block_classes, reference_class "
                      "(baseline), parameter_names."),
    click.option("--hessian", type=click.Choice(["exact", "gauss-newton"]), default="exact", show_default=True,
                 help="Per-sample curvature J_n: exact, or Gauss–Newton ρ''(f)∇f∇fᵀ (rank one: the fast path; "
                      "positive semi-definite even where the network is non-convex). Identical for GLMs."),
    click.option("--theta-hat", type=click.Path(dir_okay=False), default=None,
                 help="Expand at these parameters (.npy, D numbers; e.g. trained network weights) instead of "
                      "fitting the MAP; the JSON reports gradient_norm ‖∇L(θ̂)‖, gradient_noise_ratio "
                      "√(N ∇Lᵀ C⁻¹ ∇L) (> 1 prints a warning) and hessian_min_eigenvalue; an H that is not "
                      "positive definite is refused."),
    click.option("--fit", "fit", is_flag=True, default=False,
                 help="A torch network (--model FILE.py:NAME made by from_torch): fit θ̂ (L-BFGS on the whole "
                      "network from its weights, with a progress line and an estimate of its time) instead of "
                      "taking the module's current weights as θ̂ (the default: a trained network; the JSON's "
                      "theta_hat_source says which, gradient_norm ‖∇L(θ̂)‖ how stationary it is)."),
    click.option("--noise-variance", type=float, default=1.0, show_default=True,
                 help="σ² of the linear / beta-linear models and of the mlp Gaussian likelihood."),
    click.option("--beta-power", type=float, default=None, help="β-divergence power P > 1 (beta-linear)."),
    click.option("--prior-precision", type=float, default=0.0, show_default=True,
                 help="Γ = G·I, the prior precision (regulariser R(θ) = ½θᵀΓθ, mean loss adds R/N)."),
    click.option("--prior-precision-matrix", type=click.Path(exists=False, dir_okay=False), default=None,
                 help="Γ from a (D, D) .npy file (overrides --prior-precision)."),
    click.option("--subsample", type=click.IntRange(min=1), default=None,
                 help="Fit θ̂ and the expansion on M rows drawn at random (Algorithm 1, step 1; 1 ≤ M ≤ N)."),
    click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Seed for anything random, an integer ≥ 0 (echoed)."),
    click.option("--scheduler", default=None, metavar="ADDRESS",
                 help="Run the data reductions (MAP fit, expansion, C̄(Σ)) of out-of-core DATA (a folder with "
                      "X.npy/y.npy or a .parquet file) on a Dask cluster: 'local' (2 local workers) or a "
                      "scheduler address (tcp://host:8786). Same numbers as without it; .csv/.npz/--example data "
                      "are reduced in this process."),
)

batch_options = compose(
    click.option("--batch-size", type=int, required=True, help="Minibatch size B (1 ≤ B ≤ N)."),
    click.option("--without-replacement", is_flag=True,
                 help="Minibatches drawn without replacement (noise × (N−B)/(N−1)); default with replacement."),
    click.option("--inverse-temperature", "inverse_temperature", default="inf", show_default=True,
                 help="β: 'inf' = SGD, 'N' = the number of data points (canonical SGLD), 'cN' = c·N (e.g. 2N), or a number > 0."),
    click.option("--momentum", type=float, default=0.0, show_default=True,
                 help="Heavy-ball momentum κ in [0, 1) (Wang, Ding & Huggins (2026) eq. B.1)."),
)
