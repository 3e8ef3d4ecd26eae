"""User-defined models: ``--model path/to/file.py:NAME``.

NAME names an object in that file implementing the model protocol
(:mod:`sgtune.models.base`): an instance, or a class (or other callable) sgtune calls without
arguments to get one. A complete example file (a logistic regression written by hand)::

    # my_model.py
    import numpy as np
    from sgtune.models import RankOneCurvature

    class MyLogistic:
        name = "my-logistic"
        fit_method = "newton"            # convex: damped Newton (default "lbfgs" needs initial_params)

        def per_sample_losses(self, theta, X, y):
            eta = X @ theta
            return np.logaddexp(0.0, eta) - y * eta

        def per_sample_grads(self, theta, X, y):
            p = 1.0 / (1.0 + np.exp(-(X @ theta)))
            return (p - y)[:, None] * X

        def curvature(self, theta, X, y):           # J_n = p(1−p) x_n x_nᵀ: rank one
            p = 1.0 / (1.0 + np.exp(-(X @ theta)))
            return RankOneCurvature(X, p * (1.0 - p))

    MODEL = MyLogistic()

and ``sgtune lambda data.csv --model my_model.py:MODEL --batch-size 64``.

A network model that also offers ``features(theta, X)`` and ``last_layer_likelihood`` (the protocol's
last-layer part, :mod:`sgtune.models.base`) has its output layer on frozen features as a model of its own:
``sgtune lambda data.csv --model last-layer --features-from my_net.py:MODEL --batch-size 64`` fits the
network exactly as ``--model my_net.py:MODEL`` does (or takes its parameters from ``--theta-hat``) and
tunes the head on φ(X; θ̂); :class:`UserModel` keeps the file's ``path.py:NAME`` (``source``) so a
remedy can name it.

A model file cannot break the command line's contract: while it is imported, and in every call
sgtune makes into the model, what it prints goes to stderr (stdout holds the JSON document),
``sys.argv`` holds only the file's path (so ``argparse`` at import time sees no sgtune options), a
``sys.exit`` or any exception becomes one :class:`~sgtune.models.base.ModelError` naming the file,
the name and the method, and a changed working directory is changed back. The file's folder is put
on ``sys.path`` (as Python does for a script), so the file can import a module beside it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from ..core.errors import SgtuneError
from .base import CURVATURE_METHODS, ModelError, model_label

__all__ = ["load_model_file", "load_file_object", "as_model", "is_model_file_spec", "check_protocol", "UserModel"]

REQUIRED = ("per_sample_losses", "per_sample_grads")


def is_model_file_spec(spec: str) -> bool:
    """Tell whether ``spec`` looks like ``path.py:NAME``.

    Parameters
    ----------
    spec : str
        What the user gave as the model (a model name or ``path.py:NAME``).

    Returns
    -------
    bool
        True for a model file and the name of an object in it.

    Examples
    --------
    >>> from sgtune.models.user import is_model_file_spec
    >>> is_model_file_spec("models/net.py:MODEL"), is_model_file_spec("logistic")
    (True, False)
    """
    path, sep, name = spec.rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(name)


def check_protocol(model: Any, where: str) -> None:
    """Raise :class:`ModelError` listing the protocol methods ``model`` lacks.

    Parameters
    ----------
    model : object
        The candidate model.
    where : str
        What to call it in the message (e.g. ``"net.py:MODEL"``).

    Raises
    ------
    ModelError
        A required method or every way to give the curvature is missing.

    Examples
    --------
    >>> from sgtune.models import ModelError
    >>> from sgtune.models.user import check_protocol
    >>> try:
    ...     check_protocol(object(), "net.py:MODEL")
    ... except ModelError as exc:
    ...     print(str(exc)[:40])
    net.py:MODEL is not a model: it lacks pe
    """
    missing = [m for m in REQUIRED if not callable(getattr(model, m, None))]
    if not any(callable(getattr(model, m, None)) for m in CURVATURE_METHODS):
        missing.append(" or ".join(f"{m}()" for m in CURVATURE_METHODS))
    if missing:
        raise ModelError(f"{where} is not a model: it lacks {', '.join(m if m.endswith(')') else m + '()' for m in missing)}"
                         " (see sgtune.models.base for the protocol)")


def load_model_file(spec: str) -> Any:
    """The model object NAME from ``path.py:NAME`` (imported as a fresh module), checked against the protocol.

    Parameters
    ----------
    spec : str
        ``path.py:NAME``.

    Returns
    -------
    UserModel
        The object, wrapped so that its errors name the file and the method.

    Raises
    ------
    ModelError
        The file does not exist, fails on import, lacks NAME, or NAME is not a model (one line
        naming the file and what is wrong).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from sgtune.models.user import load_model_file
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "squares.py"
    >>> _ = path.write_text(
    ...     "class Squares:\\n"
    ...     "    name = 'squares'\\n"
    ...     "    def per_sample_losses(self, theta, X, y): return 0.5 * (y - X @ theta) ** 2\\n"
    ...     "    def per_sample_grads(self, theta, X, y): return -(y - X @ theta)[:, None] * X\\n"
    ...     "    def per_sample_hessians(self, theta, X, y): return X[:, :, None] * X[:, None, :]\\n"
    ...     "MODEL = Squares()\\n")
    >>> model = load_model_file(f"{path}:MODEL")
    >>> model.name
    'squares'
    """
    return as_model(load_file_object(spec, "`model`"), spec)


def as_model(obj: Any, spec: str, param: str = "model") -> UserModel:
    """The object NAME of ``spec`` (:func:`load_file_object`) as a checked, wrapped model.

    A class (or other callable without ``per_sample_grads``) is called without arguments first.

    Parameters
    ----------
    obj : object
        The object the file defines.
    spec : str
        ``path.py:NAME``.
    param : str, optional
        The parameter that named it, in messages (``model``, or ``features_from`` for the last layer of a
        network model).

    Returns
    -------
    UserModel
        The model, wrapped so that its errors name the file and the method.

    Raises
    ------
    ModelError
        Calling it fails, or it is not a model.

    Examples
    --------
    >>> from sgtune.models.user import as_model
    >>> class Squares:
    ...     name = "squares"
    ...     def per_sample_losses(self, theta, X, y): return 0.5 * (y - X @ theta) ** 2
    ...     def per_sample_grads(self, theta, X, y): return -(y - X @ theta)[:, None] * X
    ...     def per_sample_hessians(self, theta, X, y): return X[:, :, None] * X[:, None, :]
    >>> as_model(Squares, "squares.py:Squares").name
    'squares'
    """
    path_s, _, name = spec.rpartition(":")
    if isinstance(obj, type) or (callable(obj) and not callable(getattr(obj, "per_sample_grads", None))):
        obj = guarded(obj, f"`{param}={spec}`: calling {name}() in {path_s}", os.getcwd())()
    check_protocol(obj, f"`{param}={spec}` ({model_label(obj)})")
    return UserModel(obj, spec)


def load_file_object(spec: str, option: str) -> Any:
    """The object NAME of ``path.py:NAME`` as the file defines it.

    The file is imported as a fresh module under the model file's rules (module docstring).

    Parameters
    ----------
    spec : str
        ``path.py:NAME``.
    option : str
        What gave it, named in messages: a parameter in backticks (`` `model` ``, which the command line
        shows as ``--model``) or an option (``--features-from``).

    Returns
    -------
    object
        The object, unchecked.

    Raises
    ------
    ModelError
        The file does not exist, fails on import, or lacks NAME.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from sgtune.models.user import load_file_object
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "features.py"
    >>> _ = path.write_text("WIDTH = 3\\n")
    >>> load_file_object(f"{path}:WIDTH", "--features-from")
    3
    """
    path_s, sep, name = spec.rpartition(":")
    if not sep or not path_s.endswith(".py") or not name:
        raise SgtuneError(f"{option} {spec!r}: give path/to/file.py:NAME")
    path = Path(path_s)
    if not path.is_file():
        raise ModelError(f"{option} {spec}: file {path_s} does not exist")
    mod_name = f"sgtune_user_model_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:  # pragma: no cover - .py files always get a loader
        raise ModelError(f"{option} {spec}: cannot import {path_s}")
    module = importlib.util.module_from_spec(loader_spec)
    folder = str(path.resolve().parent)
    if folder not in sys.path:  # as for a script: a module beside the file can be imported
        sys.path.insert(0, folder)
    sys.modules[mod_name] = module
    argv = sys.argv
    sys.argv = [path_s]  # argparse at import time must not read sgtune's options
    try:
        guarded(loader_spec.loader.exec_module, f"{option} {spec}: importing {path_s}", os.getcwd())(module)
    except ModelError:
        sys.modules.pop(mod_name, None)
        raise
    finally:
        sys.argv = argv
    if not hasattr(module, name):
        raise ModelError(f"{option} {spec}: {path_s} defines no name {name!r}")
    return getattr(module, name)


def guarded(fn: Callable[..., Any], subject: str, cwd: str, method: str = "") -> Callable[..., Any]:
    """``fn`` run under the model file's rules (module docstring): prints to stderr (main thread),
    ``sys.exit`` and exceptions as one :class:`ModelError` ("{subject} raised ValueError in {method}: …"),
    working directory ``cwd`` restored. sgtune's own errors (e.g. a model's ``check_response``) pass through."""
    where = f" in {method}" if method else ""

    def call(*args: Any, **kwargs: Any) -> Any:
        main = threading.current_thread() is threading.main_thread()
        stdout = sys.stdout
        if main:
            sys.stdout = sys.stderr
        try:
            return fn(*args, **kwargs)
        except SgtuneError:
            raise
        except SystemExit as exc:
            raise ModelError(f"{subject} called sys.exit({exc.code!r}){where} (argparse reading the command line?); "
                             "a model file must not exit: guard script code with if __name__ == '__main__'") from None
        except Exception as exc:
            raise ModelError(f"{subject} raised {type(exc).__name__}{where}: {exc}") from None
        finally:
            if main:
                sys.stdout = stdout
            try:
                moved = os.getcwd() != cwd
            except OSError:  # the folder it moved to was removed
                moved = True
            if moved:
                os.chdir(cwd)

    return call


class UserModel:
    """A user's model object with its source (``file.py:NAME``) for messages.

    Every attribute is forwarded, its methods guarded (an error names the file and the method).

    Parameters
    ----------
    model : object
        The user's model.
    source : str
        ``file.py:NAME``.
    cwd : str or None, optional
        The working directory the file was loaded from (default: the current one).

    See Also
    --------
    load_model_file : Loads and wraps a model file.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from sgtune.models.user import load_model_file
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "squares.py"
    >>> _ = path.write_text(
    ...     "class Squares:\\n"
    ...     "    name = 'squares'\\n"
    ...     "    def per_sample_losses(self, theta, X, y): return 0.5 * (y - X @ theta) ** 2\\n"
    ...     "    def per_sample_grads(self, theta, X, y): return -(y - X @ theta)[:, None] * X\\n"
    ...     "    def per_sample_hessians(self, theta, X, y): return X[:, :, None] * X[:, None, :]\\n"
    ...     "MODEL = Squares()\\n")
    >>> model = load_model_file(f"{path}:MODEL")
    >>> type(model).__name__, model.source.endswith("squares.py:MODEL")
    ('UserModel', True)
    """

    def __init__(self, model: Any, source: str, cwd: str | None = None) -> None:
        self.model = model
        self.source = source
        self.cwd = os.getcwd() if cwd is None else cwd

    @property
    def name(self) -> str:
        return model_label(self.model)

    def __getattr__(self, attr: str) -> Any:
        model = self.__dict__.get("model")
        if model is None or attr.startswith("__"):
            raise AttributeError(attr)
        value = getattr(model, attr)
        if not callable(value) or isinstance(value, type):
            return value
        call = guarded(value, f"model {self.source}", self.cwd, attr)
        if attr != "with_hessian":
            return call
        return lambda *a, **k: UserModel(call(*a, **k), self.source, self.cwd)

    def __repr__(self) -> str:
        return f"UserModel({self.source})"

