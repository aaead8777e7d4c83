"""What every command's shell shares: this run's environment, warnings and errors on stderr, the
config file read with its notes, and the wrapper that turns a command's outcome into an exit status.

This module and its siblings are the only code in ibdiag that prints or exits.
"""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ibdiag.cli.env import Environment, current
from ibdiag.cli.errors import _silence, error_text, write_error, write_to, write_warning
from ibdiag.cli.main import command_starts
from ibdiag.cli.options import ExitCodes, ExitCodesOption
from ibdiag.config import Config, load_config
from ibdiag.errors import ExitStatus, IbdiagError
from ibdiag.outfile import check_output_path


def env() -> Environment:
    """This run's environment (streams, terminal, environ)."""
    return current().env


def debug_enabled(flag: bool = False) -> bool:
    return flag or current().debug


def print_error(message: str, hint: str | None = None) -> None:
    """``ibdiag: error: <message>`` and ``hint: <hint>`` on stderr (no exit status: see errors.write_error)."""
    write_to(env().stderr, error_text(message, hint))


def print_warning(message: str) -> None:
    write_warning(current(), message)


def read_config(path: Path | None) -> Config:
    """``load_config(path)`` (else ``$IBDIAG_CONFIG`` of this run's environment), its deprecation notes
    (old key names) printed as warnings."""
    cfg = load_config(path if path is not None else (env().environ.get("IBDIAG_CONFIG") or None))
    for note in cfg.notes:
        print_warning(note)
    return cfg


def _with_boundary_options(fn: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    """Every command also takes ``--exit-codes`` (the boundary applies it): added to the signature typer reads."""
    sig = inspect.signature(fn, eval_str=True)
    if "exit_codes" in sig.parameters:
        return
    extra = inspect.Parameter(
        "exit_codes",
        inspect.Parameter.KEYWORD_ONLY,
        default=ExitCodes.ibdiag,
        annotation=ExitCodesOption,
    )
    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), extra])  # type: ignore[attr-defined]  # inspect reads it; Callable does not declare it
    wrapper.__annotations__ = {**getattr(fn, "__annotations__", {}), "exit_codes": ExitCodesOption}


def handle_errors(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body: its return value is the exit status; ibdiag errors become messages.

    IbdiagError -> its exit status with ``error:``/``hint:`` lines; Ctrl-C -> 130; anything else is a
    bug: exit 3 with a one-line message, the traceback only with ``--debug``. All of them through the
    one error writer (``cli/errors.py``), which also answers ``-o line``.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        session = current()
        session.nagios = kwargs.pop("exit_codes", ExitCodes.ibdiag) is ExitCodes.nagios
        session.command = fn.__name__.removesuffix("_command")
        fmt = kwargs.get("fmt")
        if fmt is not None:
            session.line = getattr(fmt, "value", fmt) == "line"
            session.junit = getattr(fmt, "value", fmt) == "junit"
        session.strict = bool(kwargs.get("strict", False))
        debug = debug_enabled(bool(kwargs.get("debug", False)))
        command_starts()
        try:
            if "textfile" in kwargs:
                session.textfile = None  # a path that cannot be written is a usage error now, not a second error at the end
                check_output_path(kwargs["textfile"], "--textfile")
                session.textfile = kwargs["textfile"]
            status = fn(*args, **kwargs)
        except typer.Exit:
            raise
        except IbdiagError as e:
            if debug:
                traceback.print_exc(file=env().stderr)
            raise typer.Exit(write_error(session, e.message, e.hint, e.exit_status)) from None
        except KeyboardInterrupt:
            raise typer.Exit(
                write_error(session, "interrupted", None, ExitStatus.INTERRUPTED)
            ) from None
        except BrokenPipeError:
            # `ibdiag ... | head`: the reader went away; nothing more to say to it.
            silence_stdout()
            raise typer.Exit(int(ExitStatus.OK)) from None
        except Exception as e:  # a bug: say so plainly
            if debug:
                traceback.print_exc(file=env().stderr)
            status = write_error(
                session,
                f"internal error: {type(e).__name__}: {e}",
                "rerun with --debug for the traceback and report it",
                ExitStatus.CANNOT_RUN,
            )
            raise typer.Exit(status) from None
        raise typer.Exit(int(status or 0))

    _with_boundary_options(fn, wrapper)
    return wrapper


def silence_stdout() -> None:
    """Point stdout at /dev/null after the reader closed the pipe, so the flush at exit cannot fail."""
    _silence(env().stdout)
