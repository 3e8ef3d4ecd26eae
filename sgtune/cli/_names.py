"""How the command line names things: the arguments as the user typed them, and the table from the library's
parameter names to the options that set them.

The lowest of the command line's helper modules (it imports none of them): :mod:`sgtune.cli._io` turns library
messages into option names through it (``step_matrix must …`` -> ``--lambda must …``), and
:mod:`sgtune.cli._remedies` turns a library remedy (``{"inv_temperature": 42.5}``) into the command line that
applies it.
"""
from __future__ import annotations

import contextvars

#: the command line as typed (set by the group's ``main``), so messages can name ``-o`` when the user typed ``-o``
ARGV: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("sgtune_argv", default=())

#: The library's messages name Python parameters (``step_matrix must be …``); on the command line they
#: should name the option the user typed. Library name -> the command parameters (click ``name``) that
#: set it, by preference: the first the command has and the user gave, else the first it has.
PARAM_OPTIONS: dict[str, tuple[str, ...]] = {
    "step_matrix": ("lambda_file", "lambda_path", "step_size"),
    "step_size": ("step_size",),
    "inv_temperature": ("inverse_temperature", "inverse_temperatures"),
    "inverse_temperature": ("inverse_temperature", "inverse_temperatures"),
    "batch_size": ("batch_size",),
    "n_steps": ("steps",),
    "n_chains": ("chains",),
    "burn_in": ("burn_in",),
    "batches_per_chain": ("batches_per_chain",),
    "thin": ("thin",),
    "momentum": ("momentum",),
    "family": ("family", "families"),
    "decay": ("decay",),
    "friction": ("friction",),
    "guardrail_floor": ("guardrail_floor",),
    "refresh_length": ("refresh_length",),
    "noise_weight": ("noise_weight",),
    "noise_bias": ("noise_bias",),
    "noise_variance": ("noise_variance",),
    "beta_power": ("beta_power",),
    "prior_precision": ("prior_precision_matrix", "prior_precision"),
    "theta_hat": ("theta_hat",),
    "theta": ("theta_path",),
    "true_theta": ("true_theta",),
    "theta_star": ("true_theta",),
    "subsample": ("subsample",),
    "seed": ("seed",),
    "samples": ("samples_path",),
    "target": ("target",),
    "target_cov": ("target",),
    "relative_tolerance": ("relative_tolerance",),
    "inflate_prediction": ("inflate_prediction",),
    "average_window": ("average_window",),
    "observable": ("observable",),
    "antisymmetric": ("antisymmetric",),
    "diffusion": ("diffusion",),
    "preconditioner": ("preconditioner",),
    "alpha": ("alpha",),
    "gamma": ("gamma",),
    "budget": ("budget",),
    "sigma2": ("sigma2",),
    "step": ("step",),
    "block": ("block",),
    "blocks": ("blocks",),
    "hessian": ("hessian",),  # only where --hessian takes a file (fluctuation's A), see FILE_ONLY
    "hidden_sizes": ("hidden_sizes",),
    "model": ("model",),
    "features_from": ("features_from",),
    "head": ("head",),
    "repeat": ("repeat",),
    "refine_rounds": ("refine_rounds",),
    "rounds": ("refine_rounds",),
    "activation": ("activation",),
    "likelihood": ("likelihood",),
    "layout": ("layout",),
    "scheduler": ("scheduler",),
    "plot": ("plot_path",),
    "response": ("response",),
    "against": ("against",),
}

#: names of matrices that map only to an option taking a file: lambda's --hessian {exact,gauss-newton}
#: is not the Hessian its messages talk about
FILE_ONLY = {"hessian"}
