"""The output options of the commands and the loaders behind the shared data options.

The shared data, model and batch options are declared in :mod:`sgtune.cli._shared_options`; this module adds
the output options (``--json``, ``--overwrite``, ``-q``, ``--strict``, with ``--config``) and
:func:`load_problem`, which turns the parsed values into
(Dataset, GLM, Γ, Expansion). Commands pass ``**kwargs`` through these helpers so every
command spells the shared options identically (docs/cli.rst).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from ..io.data import EXAMPLES, Dataset, example, load_dataset
from ..core.errors import DataFormatError, SgtuneError, ShapeError
from ..models import MODEL_NAMES, Expansion, expand, fit_map, get_model, model_dim, prior_matrix
from ..models.base import ModelError
from ..models.lastlayer import LastLayerModel
from ..models.user import is_model_file_spec, load_model_file
from ._config import config_option, from_file
from ._io import announced, check_writable, info
from ._shared_options import compose

DATA_KEYS = ("data", "example", "response", "intercept", "model", "noise_variance", "beta_power",
             "prior_precision", "prior_precision_matrix", "subsample", "seed", "hidden_sizes", "activation",
             "likelihood", "hessian", "theta_hat", "scheduler", "layout", "features", "features_from", "head", "fit")
#: --features-from mlp: the last layer of sgtune's own network (``--model mlp``'s options) at its fit
MLP_FEATURES = "mlp"


def data_argv(kw: dict[str, Any]) -> list[str]:
    """The shared data options (:data:`DATA_KEYS`, but ``--seed``) as the user gave them, as command-line
    tokens: what another ``sgtune`` command needs to load the same problem (e.g. ``plan``'s ``run_argv``)."""
    ctx = click.get_current_context()
    out: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name not in DATA_KEYS or name == "seed" or kw.get(name) is None:
            continue
        if ctx.get_parameter_source(name) in (click.core.ParameterSource.DEFAULT,
                                              click.core.ParameterSource.DEFAULT_MAP):
            continue
        value = kw[name]
        if isinstance(param, click.Argument):
            out.append(str(value))
        elif getattr(param, "is_flag", False):
            if value:
                out.append(param.opts[0])
        else:
            out += [param.opts[0], str(value)]
    return out



#: --json, --overwrite, -q, --strict: the output options of every command (those without a main array use
#: only these)
json_output_options = compose(
    config_option,
    click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                 help="Write the JSON document to FILE (a name ending in .json; '-' is stdout) instead of stdout."),
    click.option("--overwrite", is_flag=True, help="Allow replacing existing output files."),
    click.option("-q", "--quiet", is_flag=True,
                 help="No human-readable output on stderr (warnings still are, and a step still running after 10 s "
                      "says what it waits for; SGTUNE_PROGRESS_AFTER=SECONDS|never sets that threshold)."),
    click.option("--strict", is_flag=True,
                 help="Exit 4 (after writing the outputs) when the answer or the chain should not be trusted: "
                      "a prediction that does not apply, an unhealthy chain."),
)

output_options = compose(
    click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                 help="Write the main array to this .npy file."),
    json_output_options,
)

#: --no-applicability: every command that computes the applicability report (plan: --applicability/--no-…)
applicability_option = click.option(
    "--no-applicability", "no_applicability", is_flag=True,
    help="Skip the applicability report (whether the chain on the loss itself behaves like the linearised chain; "
         "it evaluates the model at about 40–200 points of the predicted spread, on a random subsample of rows "
         "for data read out of core). JSON: applicability = {\"checked\": false, \"reason\": "
         "\"--no-applicability\"}, and a warning says the prediction was not checked.")


@dataclass(frozen=True)
class LoadedProblem:
    """What the shared options describe: data, model, prior and the expansion at θ̂."""

    dataset: Dataset
    model: Any
    prior_precision: np.ndarray
    expansion: Expansion

    @property
    def dim(self) -> int:
        """D, the number of parameters (≠ the number of covariates for a network)."""
        return self.expansion.dim


def expansion_keys(e: Expansion) -> dict[str, Any]:
    """JSON keys describing the expansion point: ‖∇L(θ̂)‖, its size in noise units, λ_min(H), D, the parameter
    names (one per coordinate of θ: the rows of θ̂, Λ and every covariance) and, for a model that describes its
    parameterisation (multinomial: ``classes``, ``layout``, …), those keys."""
    keys = {"gradient_norm": e.gradient_norm, "gradient_noise_ratio": e.gradient_z,
            "hessian_min_eigenvalue": e.hessian_min_eigenvalue, "dim": e.dim,
            "parameter_names": list(e.parameter_names or ())}
    if e.model_description:
        keys.update(e.model_description)
    return keys


def load_npy(path: str, name: str) -> np.ndarray:
    """The array given to option ``name``: a ``.npy`` file (``numpy.save``), or a ``.csv`` / ``.txt``
    of numbers (one matrix row per line, comma- or blank-separated); every failure is one line
    naming the option and saying what the file should hold."""
    p = Path(path)
    if p.is_dir():
        raise DataFormatError(f"{name} {path} is a folder; give a .npy file (numpy.save) or a .csv of numbers")
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except FileNotFoundError:
        raise DataFormatError(f"{name}: file {path} does not exist") from None
    except OSError as exc:
        raise DataFormatError(f"{name}: cannot read {path} ({exc.strerror or exc})") from None
    if not head:
        raise DataFormatError(f"{name} {path} is empty; give a .npy file (numpy.save) or a .csv of numbers")
    if head.startswith(b"\x93NUMPY"):
        try:
            return np.load(p, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise DataFormatError(f"{name}: cannot read {path} as .npy ({exc or 'truncated'}); write it again with "
                                  "numpy.save") from None
    if head.startswith(b"PK"):
        raise DataFormatError(f"{name} {path} is an .npz archive (several arrays); give one array as a .npy file")
    if p.suffix.lower() in (".csv", ".txt", ".tsv"):
        return _load_text_array(p, name)
    raise DataFormatError(f"{name} {path} is not a .npy file (it lacks the .npy header); write the array with "
                          "numpy.save, or give numbers as a .csv")


def _load_text_array(p: Path, name: str) -> np.ndarray:
    """Numbers from a text file, one matrix row per line (a single line or column is a vector)."""
    try:
        text = p.read_text(encoding="utf-8-sig")  # -sig: a byte-order mark (Excel) is not a number
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{name}: cannot read {p} as text ({exc}); give a .csv of numbers or a .npy") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f for f in line.replace(",", " ").replace(";", " ").split()]
        try:
            rows.append([float(f) for f in fields])
        except ValueError:
            bad = next(f for f in fields if not _is_float(f))
            raise DataFormatError(f"{name} {p}, line {lineno}: {bad[:20]!r} is not a number; the file must hold "
                                  "only numbers, one matrix row per line (no header)") from None
    if not rows:
        raise DataFormatError(f"{name} {p} holds no numbers; give one matrix row per line (or a .npy file)")
    if len({len(r) for r in rows}) != 1:
        raise DataFormatError(f"{name} {p}: the rows have different lengths ({sorted({len(r) for r in rows})}); "
                              "give one matrix row per line")
    arr = np.array(rows, dtype=float)
    return arr.reshape(-1) if 1 in arr.shape else arr


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_float_npy(path: str, name: str) -> np.ndarray:
    """:func:`load_npy` as float64; non-numeric content is a one-line error naming the option."""
    arr = load_npy(path, name)
    try:
        return np.asarray(arr, dtype=float)
    except (TypeError, ValueError):
        raise DataFormatError(f"{name}: {path} is not numeric (dtype {arr.dtype})") from None


def load_data_model(kw: dict[str, Any]) -> tuple[Dataset, Any]:
    """The data set (DATA or ``--example``, with ``--intercept``) and the model from the shared options."""
    if kw.get("data") is not None and kw.get("example") is not None:  # one from the file: the command line wins
        if from_file("data") != from_file("example"):
            kw = {**kw, ("data" if from_file("data") else "example"): None}
    if (kw.get("data") is None) == (kw.get("example") is None):
        raise click.UsageError("give exactly one of DATA (a .csv, .npz or .parquet file, or a folder with X.npy "
                               "and y.npy) or --example NAME")
    if kw.get("example"):
        ds = example(kw["example"], seed=0)
        # an example named on the command line brings its own model (the file's model is for the file's DATA)
        own = kw.get("model") is None or (from_file("model") and not from_file("example"))
        model_name = EXAMPLES[kw["example"]][1] if own else kw["model"]
        if kw.get("intercept"):
            ds = Dataset(np.column_stack([np.ones(ds.n_data), ds.X]), ds.y, ("intercept", *ds.names), ds.source)
    else:
        if kw.get("model") is None:
            raise click.UsageError("--model is required with a DATA file")
        ds = load_dataset(kw["data"], response=kw.get("response", "y"), intercept=kw.get("intercept", False),
                          categorical_response=kw["model"] == "multinomial" or (
                              kw["model"] == "last-layer" and kw.get("likelihood") == "softmax"))
        model_name = kw["model"]
    if model_name == "last-layer":
        if kw.get("layout", "baseline") != "baseline":
            raise click.UsageError("--layout is an option of --model multinomial; a softmax last layer "
                                   "(--likelihood softmax) always has the full layout (one vector per class)")
        return load_last_layer(ds, kw)
    if kw.get("features") or kw.get("features_from"):
        opt = "--features" if kw.get("features") else "--features-from"
        raise click.UsageError(f"{opt} is an option of --model last-layer, not of --model {model_name}")
    if kw.get("likelihood") == "softmax":
        raise click.UsageError(f"--likelihood softmax is a likelihood of --model last-layer, not of --model "
                               f"{model_name} (mlp: gaussian, bernoulli or poisson)")
    return ds, load_model(model_name, kw, ds)


def load_last_layer(ds: Dataset, kw: dict[str, Any]) -> tuple[Dataset, Any]:
    """``--model last-layer``: the head of a trained network on its features (``--features`` FILE, or computed by
    ``--features-from`` FILE.py:NAME from DATA's covariates), with ``--likelihood``; (features data, model).
    ``--features-from mlp`` or a model file whose NAME is a network *model* (with ``features(theta, X)``): the
    output layer of that model at its fit or at ``--theta-hat`` (:func:`_network_last_layer`)."""
    from ..models.lastlayer import last_layer
    from ..models.user import guarded, load_file_object

    feats, spec = kw.get("features"), kw.get("features_from")
    if bool(feats) == bool(spec):
        raise click.UsageError("--model last-layer needs exactly one of --features FILE (the features, one row per "
                               "row of DATA) or --features-from FILE.py:NAME (the trained network)")
    lik = kw.get("likelihood") or "gaussian"
    if kw.get("head") and (feats or spec == MLP_FEATURES):
        raise click.UsageError(f"--head {kw['head']} names the output layer of a torch network given by "
                               "--features-from FILE.py:NAME; drop it")
    if spec == MLP_FEATURES:
        return _network_last_layer(ds, kw, _mlp_network(ds, kw), spec)
    if lik == "poisson":
        raise click.UsageError("--model last-layer takes --likelihood gaussian, bernoulli or softmax, not poisson")
    net = None if feats else load_file_object(spec, "--features-from")
    if net is not None and _is_network_model(net):
        return _network_last_layer(ds, kw, _user_network(net, spec, kw), spec)
    if kw.get("intercept"):
        raise click.UsageError("--intercept does not apply to --model last-layer: the output layer has its own bias")
    common = dict(likelihood=lik, noise_variance=kw.get("noise_variance", 1.0))
    if feats:
        phi = load_float_npy(feats, "--features")
        phi = phi[:, None] if phi.ndim == 1 else phi
        if phi.ndim != 2 or phi.shape[0] != ds.n_data:
            raise DataFormatError(f"--features {feats} must hold one row of features per row of DATA ({ds.n_data} "
                                  f"rows), got shape {phi.shape}")
        model, data = last_layer(lambda rows: rows, phi, np.asarray(ds.y), source=feats, **common)
        return data, model
    if not callable(net):
        raise ModelError(f"--features-from {spec}: {type(net).__name__} is neither a torch.nn.Module nor a function "
                         "features(X) (nor a model with features(theta, X))")
    X = np.asarray(ds.X)
    build = guarded(last_layer, f"--features-from {spec}", str(Path.cwd()), "computing the features")
    if kw.get("head"):
        common["head"] = kw["head"]
    try:
        model, data = build(net, X, np.asarray(ds.y), source=spec, **common)
    except SgtuneError as exc:
        if str(exc).startswith("`head="):  # a name the network lacks: a bad option value
            raise click.UsageError(f"--head {kw['head']}: {str(exc).split(': ', 1)[1]}") from None
        raise
    return data, model


def _is_network_model(obj: Any) -> bool:
    """``--features-from`` FILE.py:NAME names a model (an instance or class with the protocol's
    ``per_sample_grads``), not a torch network or a function ``features(X)``."""
    torch = sys.modules.get("torch")  # a torch network's file imported torch
    return callable(getattr(obj, "per_sample_grads", None)) and not (torch is not None
                                                                    and isinstance(obj, torch.nn.Module))


def _mlp_network(ds: Dataset, kw: dict[str, Any]) -> Any:
    """``--features-from mlp``: the network ``--model mlp`` builds from the same options."""
    if (kw.get("likelihood") or "gaussian") not in ("gaussian", "bernoulli"):
        raise click.UsageError("--features-from mlp takes --likelihood gaussian or bernoulli (the output layer is "
                               f"then a linear or logistic model), not {kw.get('likelihood')}")
    if kw.get("hidden_sizes") is None:
        raise click.UsageError("--features-from mlp needs --hidden-sizes (the network's hidden widths, as for "
                               "--model mlp, e.g. 8)")
    return load_model("mlp", kw, ds)


def _user_network(obj: Any, spec: str, kw: dict[str, Any]) -> Any:
    """``--features-from FILE.py:NAME`` naming a model: the model ``--model FILE.py:NAME`` loads (``--hessian``
    too), which must offer ``features(theta, X)``."""
    from ..models.user import as_model

    model = with_hessian(as_model(obj, spec, "features_from"), spec, kw.get("hessian") or "exact")
    if not callable(getattr(model, "features", None)):
        raise ModelError(f"--features-from {spec}: the model has no features(theta, X) method (the output layer's "
                         "input at θ, the last hidden layer's output), so sgtune cannot take its last layer; add one "
                         "with last_layer_likelihood (see sgtune.models.base), or give --model "
                         f"{spec} for the whole network")
    return model


def _given(kw: dict[str, Any], name: str) -> Any:
    """The value of option ``name`` if the user gave it (command line, environment or --config), else None."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or kw.get(name) is None:
        return kw.get(name)
    return None if ctx.get_parameter_source(name) == click.core.ParameterSource.DEFAULT else kw[name]


def _network_last_layer(ds: Dataset, kw: dict[str, Any], network: Any, spec: str) -> tuple[Dataset, Any]:
    """The output layer of a network model (``--features-from mlp`` or a model file) with the body frozen at the
    fit ``--model`` with the same options would make (same prior, seed and ``--subsample`` rows: the fit is
    deterministic) or at ``--theta-hat`` (the network's D parameters). A likelihood or σ² the model declares for
    its output layer wins; ``--likelihood`` / ``--noise-variance`` given otherwise are refused."""
    from ..models.lastlayer import declared_head, model_last_layer

    given = {} if spec == MLP_FEATURES else {"likelihood": _given(kw, "likelihood"),
                                             "noise_variance": _given(kw, "noise_variance")}
    declared_head(network, **given, required=True)  # before the fit: what the head is must be known
    d = model_dim(network, ds.dim)
    if kw.get("theta_hat"):
        theta = load_float_npy(kw["theta_hat"], "--theta-hat").reshape(-1)
        if theta.shape[0] != d:
            raise ShapeError(f"--theta-hat must hold D = {d} numbers (the weights of the network, --features-from "
                             f"{spec}) but {kw['theta_hat']} has {theta.shape[0]}")
    elif (not kw.get("fit") and callable(getattr(network, "trained_weights", None))
          and network.trained_weights() is not None):  # a torch network's current weights (--fit refits them)
        theta = np.asarray(network.trained_weights(), dtype=float)
    else:
        seed = int(kw.get("seed", 0))
        fit_ds = ds if kw.get("subsample") is None else ds.subsample(min(int(kw["subsample"]), ds.n_data),
                                                                        np.random.default_rng(seed))
        with announced(f"fitting the network for its features ({fit_ds.n_data} rows)", bool(kw.get("quiet"))):
            theta = fit_map(network, fit_ds, load_prior(kw, d), population_size=None if fit_ds is ds else ds.n_data,
                            seed=seed).theta_hat
    model, data = model_last_layer(network, theta, np.asarray(ds.X), np.asarray(ds.y), **given)
    return data, model


def load_model(spec: str, kw: dict[str, Any], dataset: Dataset | None = None) -> Any:
    """The model named by ``--model``: a GLM name, ``multinomial`` (its classes from ``dataset``'s response),
    ``mlp`` (with its options), or ``path.py:NAME``."""
    hessian = kw.get("hessian") or "exact"
    if kw.get("layout", "baseline") != "baseline" and spec != "multinomial":
        raise click.UsageError(f"--layout is an option of --model multinomial, not of --model {spec}")
    if spec == "multinomial":
        if dataset is None:  # pragma: no cover (every caller passes the data)
            raise click.UsageError("--model multinomial takes its classes from the data's response")
        from ..models.multinomial import make_multinomial

        response = "y" if dataset.source.startswith("example:") else kw.get("response", "y")
        return make_multinomial(dataset.y, layout=kw.get("layout") or "baseline",
                                source=f"{dataset.source} (--response {response})", class_names=dataset.classes)
    if spec in MODEL_NAMES:  # GLMs: the exact J_n is rank one already, --hessian changes nothing
        return get_model(spec, noise_variance=kw.get("noise_variance", 1.0), beta_power=kw.get("beta_power"))
    if spec == "mlp":
        from ..models.mlp import make_mlp

        if kw.get("hidden_sizes") is None:
            raise click.UsageError("--model mlp needs --hidden-sizes (comma-separated widths, e.g. 16,16)")
        return make_mlp(kw["hidden_sizes"], activation=kw.get("activation") or "tanh",
                        likelihood=kw.get("likelihood") or "gaussian",
                        noise_variance=kw.get("noise_variance", 1.0), hessian=hessian)
    if is_model_file_spec(spec):
        return with_hessian(load_model_file(spec), spec, hessian)
    raise click.UsageError(f"--model must be one of {', '.join(MODEL_NAMES)}, multinomial, mlp, last-layer, or "
                           f"path/to/file.py:NAME; "
                           f"got {spec!r}")


def with_hessian(model: Any, spec: str, hessian: str) -> Any:
    """A user's model with ``--hessian`` applied (``with_hessian(kind)``; ``exact``: the model as it is)."""
    if hessian == "exact":
        return model
    if not callable(getattr(model, "with_hessian", None)):
        raise ModelError(f"--hessian {hessian}: model {spec} has no with_hessian(kind) method, so it offers "
                         "no Gauss–Newton curvature; return RankOneCurvature from its curvature() instead")
    return model.with_hessian(hessian)


def load_prior(kw: dict[str, Any], dim: int) -> np.ndarray:
    """Γ from ``--prior-precision-matrix`` (a .npy file) or else ``--prior-precision`` G (Γ = G·I)."""
    if kw.get("prior_precision_matrix"):
        return prior_matrix(load_float_npy(kw["prior_precision_matrix"], "--prior-precision-matrix"), dim)
    return prior_matrix(kw.get("prior_precision", 0.0), dim)


def load_problem(kw: dict[str, Any]) -> LoadedProblem:
    """Build the problem from the shared data options (pops nothing; reads ``DATA_KEYS``)."""
    ds, model = load_data_model(kw)
    d = model_dim(model, ds.dim)
    gam = load_prior(kw, d)
    theta_hat = None
    if kw.get("theta_hat") and not (isinstance(model, LastLayerModel) and model.body_weights is not None):
        theta_hat = load_float_npy(kw["theta_hat"], "--theta-hat").reshape(-1)
        if theta_hat.shape[0] != d:
            raise ShapeError(f"--theta-hat must hold D = {d} numbers (the parameters of model {kw.get('model')}) "
                             f"but {kw['theta_hat']} has {theta_hat.shape[0]}")
    seed = int(kw.get("seed", 0))
    if kw.get("fit") and kw.get("theta_hat"):
        raise click.UsageError("--fit fits θ̂, --theta-hat gives it: drop one of them")
    if kw.get("fit") and not isinstance(model, LastLayerModel):  # a head's network was fitted when it was built
        theta_hat = _requested_fit(model, ds, gam, seed, bool(kw.get("quiet")))
    at_weights = (theta_hat is None and callable(getattr(model, "trained_weights", None))
                  and model.trained_weights() is not None)
    if kw.get("subsample") is not None:  # Alg. 1 steps 1–5 on M rows; every 1/N still uses the full N
        if int(kw["subsample"]) > ds.n_data:
            raise click.BadParameter(f"{kw['subsample']} rows asked for, but the data have N = {ds.n_data}; give "
                                     f"at most {ds.n_data}, or leave --subsample out to fit on every row",
                                     param_hint="'--subsample'")
        fit_ds = ds.subsample(int(kw["subsample"]), np.random.default_rng(seed))
        label, long = _fit_label(theta_hat, fit_ds.n_data, d)
        with announced(label, bool(kw.get("quiet")), at_once=long):
            e = expand(model, fit_ds, gam, population_size=ds.n_data, scheduler=kw.get("scheduler"),
                       theta_hat=theta_hat, seed=seed)
    else:
        label, long = _fit_label(theta_hat, ds.n_data, d)
        with announced(label, bool(kw.get("quiet")), at_once=long):
            e = expand(model, ds, gam, theta_hat=theta_hat, seed=seed, scheduler=kw.get("scheduler"))
    if at_weights:
        info(f"θ̂ = the network's current weights, not refitted (--fit fits the MAP from them); there ‖∇L(θ̂)‖ = "
             f"{e.gradient_norm:.3g}, {e.gradient_z:.3g}× its sampling noise", bool(kw.get("quiet")))
    return LoadedProblem(ds, model, gam, e)


def _requested_fit(model: Any, ds: Dataset, gam: np.ndarray, seed: int, quiet: bool) -> np.ndarray:
    """``--fit``: the MAP of a model that brings its weights, with an estimate of the time measured here (one pass
    of the mean loss's gradient over the rows, times L-BFGS's iteration limit, ~2 passes per iteration)."""
    if not callable(getattr(model, "trained_weights", None)):
        raise click.UsageError("--fit applies to a torch network (--model FILE.py:NAME made by from_torch), whose "
                               "weights are θ̂ otherwise; other models are always fitted (or expanded at --theta-hat)")
    import time

    theta0 = np.asarray(model.initial_params(ds.dim), dtype=float)
    t0 = time.perf_counter()
    model.per_sample_grads(theta0, np.asarray(ds.X), np.asarray(ds.y))
    one = time.perf_counter() - t0
    info(f"--fit: fitting θ̂ of the whole network ({ds.n_data} rows, D = {theta0.size}): one gradient pass took "
         f"{one:.2g} s here, so up to ~{2 * 200 * one:.0f} s for L-BFGS's 200 iterations", quiet)
    with announced("fitting θ̂ of the whole network", quiet):
        return fit_map(model, ds, gam, theta0=theta0, seed=seed).theta_hat


#: from this D on the fit's progress line says how long its dense D×D algebra takes, roughly
LARGE_FIT_DIM = 1000


def _fit_label(theta_hat: Any, n_rows: int, d: int = 0) -> tuple[str, bool]:
    """The fit's progress label and whether to show it at once: from D = LARGE_FIT_DIM on with a rough time
    (about 12·N·D² + 30·D³ multiply-adds — the identifiability check's and the start's decompositions of the
    N×D design, Newton's curvature passes and factorisations, the expansion's moments and eigenvalues; matched to
    a linear model at N = 2500, D = 2000 — at the speed :func:`multiply_add_rate` measures now), shown at once
    when that is over half a minute."""
    from ._io import multiply_add_rate, rough_seconds

    what = "expanding at the given θ̂" if theta_hat is not None else "fitting θ̂ and expanding"
    if d < LARGE_FIT_DIM:
        return f"{what} ({n_rows} rows)", False
    seconds = (12.0 * n_rows * d * d + 30.0 * float(d) ** 3) / multiply_add_rate()
    return (f"{what} ({n_rows} rows, D = {d}: dense D×D algebra, {rough_seconds(seconds)} at this machine's "
            "current speed)"), seconds > 30


def load_theta(path: str, dim: int) -> np.ndarray:
    """θ from a ``--theta`` .npy file holding D numbers (any shape; flattened)."""
    theta = load_float_npy(path, "--theta").reshape(-1)
    if theta.shape[0] != dim:
        raise ShapeError(f"--theta must hold D = {dim} numbers but {path} has {theta.shape[0]}")
    return theta


def load_batch_problem(kw: dict[str, Any]) -> tuple[LoadedProblem, int, float]:
    """Opening of the commands built on the shared data and batch options: (problem, B, β).

    Refuses existing ``--output`` / ``--json`` files without ``--overwrite`` first (before any
    work), then loads the problem, checks ``--batch-size`` against N and parses
    ``--inverse-temperature``.
    """
    check_writable(kw["output"], bool(kw["overwrite"]), "--output")
    check_writable(kw["json_path"], bool(kw["overwrite"]), "--json")
    prob = load_problem(kw)
    n = prob.dataset.n_data
    return prob, check_batch_size(int(kw["batch_size"]), n), parse_inv_temperature(kw["inverse_temperature"], n)


def parse_inv_temperature(value: str | float, n_data: int) -> float:
    """'inf' → ∞ (SGD), 'N' → N, 'cN' (e.g. '2N') → c·N, else a positive float."""
    s = str(value).strip()
    if s.lower() in ("inf", "infinity"):
        return math.inf
    if s == "N":
        return float(n_data)
    if s.endswith("N"):
        try:
            c = float(s[:-1])
        except ValueError:
            raise SgtuneError(f"--inverse-temperature must be 'inf', 'N', 'cN' or a number > 0, got {s!r}") from None
        if not c > 0:
            raise SgtuneError(f"--inverse-temperature multiple of N must be > 0, got {s!r}")
        return c * n_data
    try:
        v = float(s)
    except ValueError:
        raise SgtuneError(f"--inverse-temperature must be 'inf', 'N' or a number > 0, got {s!r}") from None
    if not v > 0 or math.isnan(v):
        raise SgtuneError(f"--inverse-temperature must be > 0, got {s}")
    return v


def check_batch_size(batch_size: int, n_data: int) -> int:
    if not 1 <= batch_size <= n_data:
        raise SgtuneError(f"--batch-size must be in [1, N = {n_data}], got {batch_size}")
    return batch_size


def temperature_json(beta: float) -> float | str:
    """β for JSON: the string "inf" for SGD (standard JSON has no infinity)."""
    return "inf" if math.isinf(beta) else beta
