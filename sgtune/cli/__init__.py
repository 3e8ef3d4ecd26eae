"""The ``sgtune`` command-line interface (click group; one module per command, loaded lazily).

Conventions (docs/cli.rst): one JSON document on stdout (or ``--json FILE``),
human tables and progress on stderr, exit 0 ok / 1 domain error / 2 usage error /
3 verification failed / 4 untrusted under ``--strict`` (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP),
never a partial output file. Every failure ends with one ``Error: …`` line on stderr, never a
traceback: the group's :meth:`LazyGroup.main` prints usage errors on one line, turns Ctrl-C,
SIGTERM and SIGHUP into one line each (the signal raises an exception in the main thread, so
temporary output files and the data cache are removed as on any error; a signal ignored by the
parent, as under ``nohup``, stays ignored; an interruption that a library swallowed, as numba's
compiler does inside its callbacks, is still reported as one), a failed write to stdout into one
line (a closed pipe into a quiet exit 1), and anything unexpected into one "internal error" line
(``SGTUNE_DEBUG=1`` re-raises it with its traceback).

To add a command: create ``sgtune/cli/cmd_<name>.py`` defining a click command
called ``cli`` and add one line to :data:`COMMANDS` and its help's first paragraph to :data:`SUMMARIES`.
"""
from __future__ import annotations

import _thread
import contextlib
import importlib
import os
import signal
import sys
import threading
from typing import Any, Iterator, NoReturn

import click

#: command name -> module that defines a click command named ``cli``
COMMANDS: dict[str, str] = {
    "fluctuation": "sgtune.cli.cmd_fluctuation",
    "minibatch-error": "sgtune.cli.cmd_minibatch_error",
    "noise-anisotropy": "sgtune.cli.cmd_noise_anisotropy",
    "lambda": "sgtune.cli.cmd_lambda",
    "calibrate": "sgtune.cli.cmd_calibrate",
    "ksd": "sgtune.cli.cmd_ksd",
    "covariance": "sgtune.cli.cmd_covariance",
    "derive": "sgtune.cli.cmd_derive",
    "run": "sgtune.cli.cmd_run",
    "verify": "sgtune.cli.cmd_verify",
    "reshuffle": "sgtune.cli.cmd_reshuffle",
    "plan": "sgtune.cli.cmd_plan",
}


#: command name -> the first paragraph of its help (what ``sgtune --help`` lists, shortened by click as for any
#: command), so the group's help imports no command module (each pulls in scipy, numba or sympy: seconds per
#: process). tests/cli/test_lazy_help.py checks each against the command's own help text.
SUMMARIES: dict[str, str] = {
    "fluctuation": "Fluctuation constant σ² of SG non-reversible Langevin vs its reversible baseline.",
    "minibatch-error": "Exact E‖M_SGLD‖²_F, E‖M_SGLRW‖²_F and E[M] over the minibatch draw at θ.",
    "noise-anisotropy": "Covariance V of the minibatch estimate of ∇log p(θ|D) and its anisotropy.",
    "lambda": "Tune Λ so the stationary covariance of SG(L)D equals the target (Algorithm 1 of Wang, Ding & "
              "Huggins (2026)).",
    "calibrate": "Algorithm 1: fit θ̂ (on --subsample M rows), tune Λ, run SG(L)D on all rows, report the errors.",
    "ksd": "Kernel Stein discrepancy of the rows of --samples against p(θ|𝒟) ∝ exp(−N·L(θ)).",
    "covariance": "Exact stationary covariance, spectral radius and mixing time of SG(L)D with Λ (Wang, Ding & "
                  "Huggins (2026) eqs. 11–12).",
    "derive": "Print the sympy closed form NAME (JSON keys: expression, latex, expressions).",
    "run": "Run C chains of SG(L)D from the MAP θ̂ with the numba kernels; report pooled moments.",
    "verify": "Check a stationary-covariance prediction against the chains it is about; exit 3 if rejected.",
    "reshuffle": "Exact asymptotic variance error of ULA, SGLD-RM and SGLD-RR (Shaw & Whalley (2025), section 4).",
    "plan": "Plan the cheapest run that estimates the target covariance within a tolerance.",
}


class LazyGroup(click.Group):
    """A click group that imports a command's module only when it is used (its own ``--help`` lists the
    commands from :data:`SUMMARIES`, imports none)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list (same rows, same shortening), from :data:`SUMMARIES` instead of the modules."""
        from click.utils import make_default_short_help

        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, make_default_short_help(SUMMARIES[name], limit).strip()) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        return importlib.import_module(module).cli

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # before click's own handler, which prints an empty line first
            raise Signalled(signal.SIGINT) from None

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """click's ``main`` with sgtune's failure discipline: one ``Error: …`` line on stderr for
        every failure (module docstring). ``standalone_mode=False`` keeps click's behaviour."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        from ._names import ARGV

        token = ARGV.set(tuple(sys.argv[1:] if args is None else args))
        received: list[int] = []
        try:
            with signals_as_exceptions(received, then_ignore=args is None):
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Signalled as exc:
            _fail_signalled(exc.signum)
        except click.exceptions.NoArgsIsHelpError as exc:  # bare `sgtune`: the help text, as click does
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(exc.format_message() + hint, exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort as exc:  # click's form of KeyboardInterrupt / EOFError
            if isinstance(exc.__cause__, EOFError):
                _fail("unexpected end of input", 1)
            _fail_signalled(signal.SIGINT)
        except KeyboardInterrupt:
            _fail_signalled(signal.SIGINT)
        except MemoryError as exc:
            _fail(f"out of memory{f' ({exc})' if str(exc) else ''}; use a smaller problem (e.g. --subsample, "
                  "fewer --chains or --steps) or a machine with more memory", 1)
        except OSError as exc:  # the system refused a file or device (reading DATA, a full disk, …)
            where = f"{exc.filename}: " if exc.filename else ""
            _fail(f"{where}{exc.strerror or exc}", 1)
        except Exception as exc:  # a bug: still one line for the user, the traceback on request
            if received:  # a signal a library swallowed and turned into its own error (numba's compiler)
                _fail_signalled(received[0])
            if os.environ.get("SGTUNE_DEBUG"):
                raise
            text = str(exc).splitlines()[0] if str(exc) else ""
            _fail(f"internal error ({type(exc).__name__}{': ' + text if text else ''}); this is a bug in "
                  "sgtune, please report it with the command line (SGTUNE_DEBUG=1 shows the traceback)", 1)
        finally:
            ARGV.reset(token)
        sys.exit(rv if isinstance(rv, int) else 0)


#: exit status after Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130
#: the signals a command stops on with one line (exit 128 + the signal's number) and what the line says
SIGNALS: dict[int, str] = {signal.SIGINT: "interrupted (Ctrl-C)"}
if hasattr(signal, "SIGTERM"):
    SIGNALS[signal.SIGTERM] = "terminated (SIGTERM)"
if hasattr(signal, "SIGHUP"):  # not on Windows
    SIGNALS[signal.SIGHUP] = "hung up (SIGHUP)"


class Signalled(BaseException):
    """A stop signal as an exception (a BaseException: ``except Exception`` in a library does not hide it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)


@contextlib.contextmanager
def signals_as_exceptions(received: list[int], *, then_ignore: bool = False) -> Iterator[None]:
    """While the command runs (main thread only): SIGINT raises KeyboardInterrupt, SIGTERM and SIGHUP raise
    :class:`Signalled`, each appending its number to ``received``. Signals the parent set to be ignored
    (``nohup``, a background job) and handlers someone else installed are left alone. An interruption
    raised inside a callback that cannot propagate it (Python then calls ``sys.unraisablehook``) is
    raised again in the main thread, without the "Exception ignored" report.

    ``then_ignore`` (the ``sgtune`` program itself, not an in-process caller): when the command has ended, the
    signals it handled are ignored instead of restored. The process is about to exit with the command's status
    and its outputs are in place (or removed); restored to their default, a signal arriving in the last
    milliseconds would kill it, and a finished command would report "killed by SIGHUP" with its outputs
    written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Signalled(signum)

    timers: list[threading.Timer] = []

    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, (KeyboardInterrupt, Signalled)) and received:
            # raise it again once the callback has returned (from here it would be swallowed again)
            timer = threading.Timer(0.05, _thread.interrupt_main, args=(received[0],))
            timer.daemon = True
            timers.append(timer)
            timer.start()
            return
        previous_hook(info)

    previous: dict[int, Any] = {}
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current is signal.SIG_DFL or (signum == signal.SIGINT and current is signal.default_int_handler):
            previous[signum] = signal.signal(signum, handler)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        for timer in timers:
            timer.cancel()
        sys.unraisablehook = previous_hook
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_IGN if then_ignore else old)


def _fail_signalled(signum: int) -> NoReturn:
    """One line for a stop signal, exit 128 + its number (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    what = SIGNALS.get(signum, f"stopped by signal {signum}")
    _fail(f"{what}; outputs not yet renamed into place were removed", 128 + int(signum))


def _fail(message: str, code: int) -> NoReturn:
    """The one line a failed command ends with, and its exit status."""
    try:
        click.echo(f"Error: {' '.join(str(message).split())}", err=True)
    except (OSError, ValueError):  # no terminal any more (SIGHUP) or a closed stderr: the status still says it
        pass
    sys.exit(code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sgtune")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Read the shared data and model options (DATA, --model, --batch-size, --prior-precision, …) "
                   "from this TOML file instead of ./sgtune.toml (a pyproject.toml: its [tool.sgtune] table); the "
                   "command line overrides it.")
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """sgtune: tune and predict SGD/SGLD before you run it.

    \b
    Conventions: mean loss L(θ) = (1/N) Σ_n l_n(θ) + R(θ)/N, batch size B,
    inverse temperature β (inf = SGD, N = canonical SGLD), step-size matrix Λ.
    Every command writes one JSON document to stdout (or --json FILE).

    \b
    Terms used below and in the commands' help:
      Algorithm 1  the recipe of Wang, Ding & Huggins (2026): fit θ̂, tune Λ, run, check
      sandwich     the covariance SGD settles to, J⁻¹𝓘J⁻¹/N (J: the mean Hessian,
                   𝓘: the covariance of the per-observation gradients)
      dq-exact     tune Λ with the exact discrete-time stationary covariance (ct: its
                   continuous-time limit; dq-const, lr-ws: the comparison theories)
      SGLD, SGLRW  stochastic-gradient Langevin dynamics; SGLRW: each coordinate steps ±√(2δ),
                   up with a probability set by the gradient (Mensch et al. 2025)
      SGHMC        stochastic-gradient Hamiltonian Monte Carlo (momentum with friction)
      MCLMC/SMILE  microcanonical Langevin Monte Carlo (fixed-speed velocity) with minibatch
                   gradients; smile/psmile tune its step size
      NLD, HFHR,   non-reversible Langevin dynamics, Hessian-free high-resolution and
      GAUL         generalised underdamped Langevin: the schemes `sgtune fluctuation` compares
      KSD          kernel Stein discrepancy: how far draws are from the posterior

    \b
    Exit status:
      0    success
      1    domain or runtime error (one line on stderr naming the option and the fix)
      2    usage error (a missing, unknown or out-of-range option)
      3    verification failed (verify: the prediction was rejected)
      4    with --strict: the answer or the chain should not be trusted (outputs written)
      130  interrupted (Ctrl-C); 143 terminated (SIGTERM); 129 hung up (SIGHUP)

    \b
    Project file: sgtune.toml in the working directory, else the [tool.sgtune] table of
    pyproject.toml (or --config FILE) holds the options every command shares, with the
    same types and ranges as the options, e.g.
        data = "data.csv"
        model = "logistic"
        batch-size = 32
    Precedence: command line > file > defaults; the JSON's config echoes what it supplied.
    """
    from ._config import GROUP_KEY

    ctx.meta[GROUP_KEY] = config_path  # each command's --config reads it (or ./sgtune.toml) when given none
