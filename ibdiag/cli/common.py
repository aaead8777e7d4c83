"""What every command shares: the common options, error handling, and writing a report out.

This module and its siblings are the only code in ibdiag that prints or exits.
"""

from __future__ import annotations

import functools
import inspect
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag import __version__
from ibdiag.cli.env import Environment, current
from ibdiag.cli.errors import _silence, error_text, write_error, write_to, write_warning
from ibdiag.cli.main import command_starts
from ibdiag.errors import ExitStatus, IbdiagError, UsageError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.outfile import (  # noqa: F401 - the commands' one output writer
    atomic_output,
    check_output_path,
    write_atomically,
)
from ibdiag.parse import parse_decimal


class OutputFormat(str, Enum):
    """Every ``--format`` of every command; a command refuses one it has no view for (exit 2)."""

    table = "table"
    json = "json"
    csv = "csv"
    prom = "prom"
    junit = "junit"
    html = "html"
    line = "line"


def refuse_html(value: OutputFormat) -> str:
    """Refuse ``-o html`` before the command runs: only ``ibdiag report`` writes a page. Returns the
    value as typed (typer converts a callback's result to the enum again)."""
    if value is OutputFormat.html:
        raise typer.BadParameter("html is a page of many nodes: ibdiag report FILES -o html")
    return value.value


RootOption = Annotated[
    Path,
    typer.Option(
        "--root",
        metavar="DIR|TAR",
        help="Read DIR/sys instead of /sys: a fixture, an extracted snapshot, or a snapshot .tar.gz.",
    ),
]
FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-o",
        case_sensitive=False,
        callback=refuse_html,
        help="table for people; json, csv, prom, junit for machines; line: one ASCII line (drain reason, NHC, NPD).",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="TOML thresholds and expectations (default: $IBDIAG_CONFIG, else built-in).",
    ),
]
StrictOption = Annotated[bool, typer.Option("--strict", help="Warnings fail too (exit 1).")]
ExpectRateOption = Annotated[
    float | None,
    typer.Option(
        "--expect-rate",
        parser=parse_decimal,
        metavar="GBPS",
        help="Rate every RDMA port must reach, Gb/s (overrides [ports] expected_rate_gbps; default: the node's fastest port).",
    ),
]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show Python tracebacks for errors.")]


class ExitCodes(str, Enum):
    ibdiag = "ibdiag"
    nagios = "nagios"


ExitCodesOption = Annotated[
    ExitCodes,
    typer.Option(
        "--exit-codes",
        case_sensitive=False,
        help="nagios: 0 OK, 1 WARNING (warnings only), 2 CRITICAL (a failing finding), 3 UNKNOWN (could not run).",
    ),
]
TextfileOption = Annotated[
    Path | None,
    typer.Option(
        "--textfile",
        metavar="FILE.prom",
        help="Also write the metrics (-o prom) to FILE atomically, for node_exporter's textfile collector; a run that cannot judge writes ibdiag_up 0.",
    ),
]


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
    host = os.uname().nodename  # what socket.gethostname() answers (gethostname(2) is uname's nodename), without importing socket
    if root is not None and str(root) != "/":
        from ibdiag.node.manifest import read_manifest

        manifest = read_manifest(root)
        if manifest and manifest.get("host"):
            host = str(manifest["host"])
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return RunMeta(host=host, version=__version__, generated_at=now)


@contextmanager
def open_root(root: Path) -> Iterator[Path]:
    """Yield a directory that contains ``sys/``: ``root`` itself, or a snapshot tarball extracted."""
    if root.is_file():
        from ibdiag.node.snapshot import extracted

        with extracted(root) as directory:
            yield directory
        return
    if not root.exists():
        raise UsageError(
            f"--root {root}: no such file or directory",
            hint="give a directory containing sys/ or a snapshot .tar.gz",
        )
    yield root


def console(stream: Any = "stdout") -> Any:
    """A rich console on this run's ``stream`` ("stdout" or "stderr"; or a file, laid out as a pipe),
    laid out for its terminal (or pipe)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 when the reader goes away; ibdiag keeps 1 for "failing finding".
            raise BrokenPipeError

    e = env()
    if isinstance(stream, str):
        out = e.stdout if stream == "stdout" else e.stderr
        tty = e.stdout_isatty if stream == "stdout" else e.stderr_isatty
        width = e.width(stream)
    else:
        out, tty, width = stream, False, e.width("file")
    # Colour on a terminal only; NO_COLOR (non-empty) turns it off there, FORCE_COLOR (non-empty) on anywhere.
    no_color = bool(e.environ.get("NO_COLOR"))
    force = tty or (bool(e.environ.get("FORCE_COLOR")) and not no_color)
    # markup and emoji off: a string printed is data (a PCI address 0000:ab:00.0 must not become 0000🆎00.0,
    # a firmware string "[bold]" must not restyle the table); styling comes from Text styles only.
    return _Console(
        file=out,
        width=width,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        force_terminal=force,
        no_color=no_color or None,
        _environ=dict(e.environ),
    )


def console_print(con: Any, item: Any) -> None:
    """Print ``item`` on ``con``. A Text marked no_wrap (a value to copy, a matrix) is written whole: the
    terminal folds it, a pipe keeps it. Off a terminal without $COLUMNS a table that does not fit the
    layout width is printed at its natural width: a file or a log never has a host name cut to ``gpu-no…``."""
    from rich.measure import Measurement

    e = env()
    width = None
    if not e.stdout_isatty and e.columns is None and not e.environ.get("COLUMNS"):
        need = Measurement.get(con, con.options.update_width(1 << 20), item)
        # rich's layout at the minimum still shortens some cells: a table that does not fit gets its
        # natural width, each row on one line
        width = need.maximum if need.minimum > con.width else None
    soft_wrap = getattr(item, "no_wrap", None) is True
    if width is None:
        con.print(item, soft_wrap=soft_wrap)
        return
    layout = con.width  # print(width=) is capped at the console's width: widen the console
    con.width = width
    try:
        con.print(item, soft_wrap=soft_wrap)
    finally:
        con.width = layout


def table_width() -> int:
    """Columns the table output will be printed in (the terminal's, else $COLUMNS, else wide enough to cut nothing)."""
    return int(console("stdout").width)


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
    """Hand ``report`` and its views to the boundary: written to stdout in ``fmt`` now, kept for
    ``--textfile`` and ``--exit-codes``; returns the exit status its findings call for.

    ``table``/``csv``/``prom`` build the command's own views; a format whose builder is missing is a
    usage error (exit 2), never an empty output.
    """
    record(report, strict=strict, prom=prom)
    try:
        _write(report, fmt, meta, strict=strict, table=table, csv=csv, prom=prom)
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): the exit status still tells what was found.
        silence_stdout()
    return exit_status(report, strict)


def record(report: Report, *, strict: bool, prom: Callable[[], list[Any]] | None = None) -> None:
    """Keep ``report`` for the end of the run (``--exit-codes nagios``), and its metrics for ``--textfile``."""
    session = current()
    session.report, session.strict = report, strict
    if session.textfile is not None:
        if prom is None:
            raise UsageError(
                f"ibdiag {report.command} has no metrics for --textfile",
                hint="use --textfile with ibdiag topo, counters or fabric",
            )
        from ibdiag.output.prom import render_prom

        session.prom_text = render_prom(_metrics(report, prom))


def _metrics(report: Report, prom: Callable[[], list[Any]]) -> list[Any]:
    import time

    from ibdiag.output.prom import finding_metrics, run_metrics

    return [
        *prom(),
        *finding_metrics(report),
        *run_metrics(report.command, up=True, timestamp=time.time()),
    ]


def _write(
    report: Report,
    fmt: OutputFormat,
    meta: RunMeta,
    *,
    strict: bool,
    table: Any,
    csv: Any,
    prom: Any,
) -> None:
    out = env().stdout
    if fmt is OutputFormat.json:
        from ibdiag.output.jsonout import render_json

        out.write(render_json(report, meta))
    elif fmt is OutputFormat.line:
        from ibdiag.output.line import render_line

        out.write(render_line(report, strict=strict) + "\n")
    elif fmt is OutputFormat.junit:
        from ibdiag.output.junit import render_junit

        out.write(render_junit(report, meta, strict=strict, time_s=current().elapsed()))
    elif fmt is OutputFormat.csv:
        if csv is None:
            raise UsageError(
                f"ibdiag {report.command} cannot write csv", hint="use -o table or -o json"
            )
        from ibdiag.output.csvout import render_csv

        header, rows = csv()
        out.write(render_csv(header, rows))
    elif fmt is OutputFormat.prom:
        if prom is None:
            raise UsageError(
                f"ibdiag {report.command} cannot write prom",
                hint="use -o json, or a command that reads the node (topo, counters)",
            )
        from ibdiag.output.prom import render_prom

        out.write(render_prom(_metrics(report, prom)))
    elif fmt is OutputFormat.html:
        raise UsageError(
            f"ibdiag {report.command} cannot write html", hint="ibdiag report FILES -o html"
        )
    else:
        if table is None:
            raise UsageError(f"ibdiag {report.command} cannot write a table", hint="use -o json")
        con = console("stdout")
        for item in table():
            console_print(con, item)
    out.flush()


def exit_status(report: Report, strict: bool) -> int:
    return int(ExitStatus.FAILED if report.failing(strict) else ExitStatus.OK)
