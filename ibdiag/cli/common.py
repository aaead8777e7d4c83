"""What every command shares: the common options, error handling, and writing a report out.

This module and its siblings are the only code in ibdiag that prints or exits.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ibdiag import __version__
from ibdiag.errors import ExitStatus, IbdiagError, UsageError
from ibdiag.outfile import atomic_output, check_output_path, write_atomically  # noqa: F401 - the commands' one output writer
from ibdiag.report.model import Report, RunMeta


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    prom = "prom"
    junit = "junit"


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
    typer.Option("--format", "-o", case_sensitive=False, help="table for people; json, csv, prom, junit for machines."),
]
ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", metavar="FILE", help="TOML thresholds and expectations (default: $IBDIAG_CONFIG, else built-in)."),
]
StrictOption = Annotated[bool, typer.Option("--strict", help="Warnings fail too (exit 1).")]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show Python tracebacks for errors.")]


class _State:
    debug = False


STATE = _State()


def debug_enabled(flag: bool = False) -> bool:
    return flag or STATE.debug or os.environ.get("IBDIAG_DEBUG", "") not in ("", "0")


def _to_stderr(text: str) -> None:
    """Write ``text`` to stderr. A reader that went away (stderr a closed pipe) must not change the exit
    status: the write error is dropped and stderr pointed at /dev/null, so the flush at exit is quiet."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        _silence("stderr")


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout; a reader that went away (``| head``) changes nothing (see silence_stdout)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence("stdout")


def print_error(message: str, hint: str | None = None) -> None:
    """``ibdiag: error: <message>`` and ``hint: <hint>`` on stderr."""
    _to_stderr(f"ibdiag: error: {message}\n" + (f"hint: {hint}\n" if hint else ""))


def print_warning(message: str) -> None:
    _to_stderr(f"ibdiag: warning: {message}\n")


def print_interrupted() -> None:
    _to_stderr("\nibdiag: interrupted\n")


def warn_refused(sysfs: Any) -> None:
    """One warning per path under ``--root`` that was refused (outside the root, not a regular file),
    for commands whose findings have no place for it (``counters`` lists ports, not trees)."""
    seen: set[str] = set()
    for p in sysfs.problems:
        if p.kind == "refused" and p.path not in seen:
            seen.add(p.path)
            print_warning(f"/sys/{p.path}: {p.detail}")


def read_config(path: Path | None) -> Any:
    """``load_config(path)``, its deprecation notes (old key names) printed as warnings."""
    from ibdiag.config import load_config

    cfg = load_config(path)
    for note in cfg.notes:
        print_warning(note)
    return cfg


def handle_errors(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body: its return value is the exit status; ibdiag errors become messages.

    IbdiagError -> its exit status with ``error:``/``hint:`` lines; Ctrl-C -> 130; anything else is a
    bug: exit 3 with a one-line message, the traceback only with ``--debug``.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        debug = debug_enabled(bool(kwargs.get("debug", False)))
        try:
            status = fn(*args, **kwargs)
        except typer.Exit:
            raise
        except IbdiagError as e:
            if debug:
                traceback.print_exc(file=sys.stderr)
            print_error(e.message, e.hint)
            raise typer.Exit(int(e.exit_status)) from None
        except KeyboardInterrupt:
            print_interrupted()
            raise typer.Exit(int(ExitStatus.INTERRUPTED)) from None
        except BrokenPipeError:
            # `ibdiag ... | head`: the reader went away; nothing more to say to it.
            silence_stdout()
            raise typer.Exit(int(ExitStatus.OK)) from None
        except Exception as e:  # a bug: say so plainly
            if debug:
                traceback.print_exc(file=sys.stderr)
            print_error(f"internal error: {type(e).__name__}: {e}", "rerun with --debug for the traceback and report it")
            raise typer.Exit(int(ExitStatus.CANNOT_RUN)) from None
        raise typer.Exit(int(status or 0))

    return wrapper


def silence_stdout() -> None:
    """Point stdout at /dev/null after the reader closed the pipe, so the flush at exit cannot fail
    (Python docs, "Note on SIGPIPE")."""
    _silence("stdout")


def _silence(name: str) -> None:
    stream = getattr(sys, name)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - a test runner's stream has no file descriptor


def run_meta(root: Path | None = None) -> RunMeta:
    """Envelope metadata: this host (or the snapshot's host when reading one), version, UTC now."""
    host = socket.gethostname()
    if root is not None and str(root) != "/":
        from ibdiag.snapshot import read_manifest

        manifest = read_manifest(root)
        if manifest and manifest.get("host"):
            host = str(manifest["host"])
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return RunMeta(host=host, version=__version__, generated_at=now)


@contextmanager
def open_root(root: Path) -> Iterator[Path]:
    """Yield a directory that contains ``sys/``: ``root`` itself, or a snapshot tarball extracted."""
    from ibdiag.snapshot import extracted

    if root.is_file():
        with extracted(root) as directory:
            yield directory
        return
    if not root.exists():
        raise UsageError(f"--root {root}: no such file or directory", hint="give a directory containing sys/ or a snapshot .tar.gz")
    yield root


def console(file: Any = None) -> Any:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 when the reader goes away; ibdiag keeps 1 for "failing finding".
            raise BrokenPipeError

    out = file or sys.stdout
    tty = hasattr(out, "isatty") and out.isatty()
    width = None if tty else int(os.environ.get("COLUMNS") or 200)
    return _Console(file=out, width=width, highlight=False, soft_wrap=False, force_terminal=None if tty else False)


def table_width() -> int:
    """Columns the table output will be printed in (the terminal's, or COLUMNS/200 when piped)."""
    return int(console(sys.stdout).width)


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
    """Write ``report`` to stdout in ``fmt`` and return the exit status its findings call for.

    ``table``/``csv``/``prom`` build the command's own views; a format whose builder is missing is a
    usage error (exit 2), never an empty output.
    """
    try:
        _write(report, fmt, meta, strict=strict, table=table, csv=csv, prom=prom)
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): the exit status still tells what was found.
        silence_stdout()
    return exit_status(report, strict)


def _write(report: Report, fmt: OutputFormat, meta: RunMeta, *, strict: bool, table: Any, csv: Any, prom: Any) -> None:
    out = sys.stdout
    if fmt is OutputFormat.json:
        from ibdiag.report.jsonout import render_json

        out.write(render_json(report, meta))
    elif fmt is OutputFormat.junit:
        from ibdiag.report.junit import render_junit

        out.write(render_junit(report, meta, strict=strict))
    elif fmt is OutputFormat.csv:
        if csv is None:
            raise UsageError(f"ibdiag {report.command} cannot write csv", hint="use -o table or -o json")
        from ibdiag.report.csvout import render_csv

        header, rows = csv()
        out.write(render_csv(header, rows))
    elif fmt is OutputFormat.prom:
        if prom is None:
            raise UsageError(f"ibdiag {report.command} cannot write prom", hint="use -o json, or a command that reads the node (topo, counters)")
        from ibdiag.report.prom import finding_metrics, render_prom

        out.write(render_prom([*prom(), *finding_metrics(report)]))
    else:
        if table is None:
            raise UsageError(f"ibdiag {report.command} cannot write a table", hint="use -o json")
        con = console(out)
        for item in table():
            con.print(item)
    out.flush()


def exit_status(report: Report, strict: bool) -> int:
    return int(ExitStatus.FAILED if report.failing(strict) else ExitStatus.OK)
