"""The environment a run of ``ibdiag`` sees, injected at the one boundary (:func:`ibdiag.cli.main.main`).

Commands read their streams, whether those are terminals, the terminal width, environment variables
and the debug switch from here, never from ``sys``/``os.environ``: a test hands in its own
:class:`Environment` (a fake terminal included) and runs ``--watch`` or a progress line in-process.
"""

from __future__ import annotations

import codecs
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from ibdiag.findings.model import Report

#: Non-ASCII characters ibdiag's own text uses, and what an ASCII-only stream gets instead.
ASCII_FALLBACK = {
    "\u2014": "-",  # em dash
    "\u2013": "-",  # en dash
    "\u2192": "->",
    "\u2190": "<-",
    "\u2194": "<->",
    "\u00b7": "*",  # middle dot
    "\u2022": "*",
    "\u2026": "...",
    "\u2265": ">=",
    "\u2264": "<=",
    "\u00d7": "x",
    "\u00b5": "u",  # micro sign
    "\u03bc": "u",  # greek mu
    "\u2248": "~",
    "\u2713": "ok",
    "\u2717": "x",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u00a0": " ",
    "\u2500": "-",
    "\u2502": "|",
    "\u2588": "#",
    "\u2591": ".",
    "\u2592": ":",
    "\u2593": "%",
}
ERROR_HANDLER = "ibdiag-ascii"


def _fallback(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    text = err.object[err.start : err.end]
    return "".join(ASCII_FALLBACK.get(ch, "?") for ch in text), err.end


codecs.register_error(ERROR_HANDLER, _fallback)


def to_ascii(text: str) -> str:
    """``text`` with every non-ASCII character replaced as an ASCII-only stream would show it."""
    return text.encode("ascii", ERROR_HANDLER).decode("ascii")


def _isatty(stream: IO[str]) -> bool:
    """A terminal someone reads: a tty with a size. The pty mpirun (Open MPI's I/O forwarding) or a CI
    runner gives a process reports 0 columns and ends in a file or a log: laid out as a pipe."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError, OSError):
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):
        return True


#: Columns off a terminal without $COLUMNS: prose wraps there; a table that needs more to show every
#: cell whole gets what it needs (:func:`ibdiag.cli.common.console_print`): nothing is cut in a file.
OFF_TERMINAL_COLUMNS = 200


def make_encodable(stream: IO[str]) -> None:
    """A stream whose encoding cannot write all of Unicode (``PYTHONIOENCODING=ascii``, a C locale
    without UTF-8) writes ASCII stand-ins instead of raising UnicodeEncodeError half-way through a table."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        codecs.lookup(encoding).encode("\u2014\u00b5")
        return
    except (UnicodeError, LookupError):
        pass
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors=ERROR_HANDLER)
        except (ValueError, OSError):
            pass


@dataclass(frozen=True)
class Environment:
    """Streams, terminal facts, environment variables and the debug switch of one run."""

    stdin: IO[str]
    stdout: IO[str]
    stderr: IO[str]
    stdout_isatty: bool = False
    stderr_isatty: bool = False
    columns: int | None = None
    """Terminal width; None: the terminal's own on a tty, ``$COLUMNS`` (else OFF_TERMINAL_COLUMNS) on a pipe."""
    environ: Mapping[str, str] = field(default_factory=dict)
    debug: bool = False

    @classmethod
    def from_process(cls) -> Environment:
        """This process's streams and environment (what the console script runs with)."""
        make_encodable(sys.stdout)
        make_encodable(sys.stderr)
        environ = dict(os.environ)
        return cls(
            stdin=sys.stdin,
            stdout=sys.stdout,
            stderr=sys.stderr,
            stdout_isatty=_isatty(sys.stdout),
            stderr_isatty=_isatty(sys.stderr),
            environ=environ,
            debug=environ.get("IBDIAG_DEBUG", "") not in ("", "0"),
        )

    def width(self, stream: str = "stdout") -> int | None:
        """Columns to lay out in: the injected width, the terminal's (None: rich asks it, honouring
        $COLUMNS), or off a terminal $COLUMNS, else OFF_TERMINAL_COLUMNS."""
        if self.columns is not None:
            return self.columns
        if stream in ("stdout", "stderr") and (
            self.stdout_isatty if stream == "stdout" else self.stderr_isatty
        ):
            return None
        try:
            return max(20, int(self.environ.get("COLUMNS") or OFF_TERMINAL_COLUMNS))
        except ValueError:
            return OFF_TERMINAL_COLUMNS


@dataclass
class Session:
    """One invocation: its environment and what the boundary must do at the end (mutable, per run).

    The policy fields come first from a scan of argv (so a usage error click raises can still be
    answered in the asked form), then from the command's parsed options.
    """

    env: Environment
    debug: bool = False
    line: bool = False
    junit: bool = False
    nagios: bool = False
    textfile: Path | None = None
    command: str | None = None
    report: Report | None = None
    strict: bool = False
    prom_text: str | None = None
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


_CURRENT: ContextVar[Session | None] = ContextVar("ibdiag_session", default=None)


def current() -> Session:
    """The running session; outside :func:`ibdiag.cli.main.main` (a library caller), this process's."""
    session = _CURRENT.get()
    if session is None:
        env = Environment.from_process()
        session = Session(env, debug=env.debug)
    return session


@contextmanager
def bound(session: Session) -> Iterator[Session]:
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)
