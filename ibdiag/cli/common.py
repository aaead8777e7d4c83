"""What every command shares: the common options, error handling, and writing a report out.

This module and its siblings are the only code in ibdiag that prints or exits.
"""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

from ibdiag.cli.console import console as console
from ibdiag.cli.console import console_print as console_print
from ibdiag.cli.console import table_width as table_width
from ibdiag.cli.emit import emit as emit_outputs
from ibdiag.cli.emit import exit_status as exit_status
from ibdiag.cli.emit import record as record_outputs
from ibdiag.cli.env import Environment, current
from ibdiag.cli.errors import _silence, error_text, write_error, write_to, write_warning
from ibdiag.cli.main import command_starts
from ibdiag.cli.options import (
    ConfigOption as ConfigOption,
)
from ibdiag.cli.options import (
    DebugOption as DebugOption,
)
from ibdiag.cli.options import (
    ExitCodes,
    ExitCodesOption,
    OutputFormat,
)
from ibdiag.cli.options import (
    ExpectRateOption as ExpectRateOption,
)
from ibdiag.cli.options import (
    FormatOption as FormatOption,
)
from ibdiag.cli.options import (
    RootOption as RootOption,
)
from ibdiag.cli.options import (
    StrictOption as StrictOption,
)
from ibdiag.cli.options import (
    TextfileOption as TextfileOption,
)
from ibdiag.cli.options import (
    refuse_html as refuse_html,
)
from ibdiag.errors import ExitStatus, IbdiagError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.node.root import host_of, opened_root
from ibdiag.outfile import (  # noqa: F401 - the commands' one output writer
    atomic_output,
    check_output_path,
    write_atomically,
)
from ibdiag.output.outputs import Outputs

#: The former name (for the commands not yet moved to their entry points).
open_root = opened_root


def env() -> Environment:
    """This run's environment (streams, terminal, environ)."""
    return current().env


def debug_enabled(flag: bool = False) -> bool:
    return flag or current().debug


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout; a reader that went away (``| head``) changes nothing."""
    write_to(env().stdout, text)


def print_error(message: str, hint: str | None = None) -> None:
    """``ibdiag: error: <message>`` and ``hint: <hint>`` on stderr (no exit status: see errors.write_error)."""
    write_to(env().stderr, error_text(message, hint))


def print_warning(message: str) -> None:
    write_warning(current(), message)


def warn_refused(sysfs: Any) -> None:
    """One warning per path under ``--root`` that was refused (outside the root, not a regular file),
    for commands whose findings have no place for it (``counters`` lists ports, not trees)."""
    seen: set[str] = set()
    for p in sysfs.problems:
        if p.kind == "refused" and p.path not in seen:
            seen.add(p.path)
            print_warning(f"/sys/{p.path}: {p.detail}")


def read_config(path: Path | None) -> Any:
    """``load_config(path)`` (else ``$IBDIAG_CONFIG`` of this run's environment), its deprecation notes
    (old key names) printed as warnings."""
    from ibdiag.config import load_config

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


def run_meta(root: Path | None = None) -> RunMeta:
    """Envelope metadata: this host (or the snapshot's host when reading one), version, UTC now."""
    return RunMeta.now(host_of(root))


def emit(
    report: Report,
    fmt: OutputFormat,
    meta: RunMeta,
    *,
    strict: bool = False,
    table: Callable[[], Sequence[Any]] | None = None,
    csv: Callable[[], tuple[Sequence[str], Sequence[dict[str, Any]]]] | None = None,
    prom: Callable[[], list[Any]] | None = None,
) -> int:
    """The former writer's signature, for the commands not yet moved to :mod:`ibdiag.cli.emit`."""
    out = Outputs(
        report,
        meta,
        table=None if table is None else (lambda layout: table()),
        csv=csv,
        prom=prom,
    )
    return emit_outputs(out, fmt, strict=strict)


def record(report: Report, *, strict: bool, prom: Callable[[], list[Any]] | None = None) -> None:
    """The former recorder's signature (see :func:`emit`)."""
    record_outputs(Outputs(report, RunMeta("", "", ""), prom=prom), strict=strict)
