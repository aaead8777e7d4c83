"""The one error writer, and what the boundary does at the end of every run.

* :func:`write_error`: ``ibdiag: error: <message>`` + ``hint: <hint>`` on stderr, and under ``-o line``
  the ``UNKNOWN ibdiag: <message>`` line on stdout; returns the exit status.
* :func:`finish`: ``--textfile`` (the run's metrics, or ``ibdiag_up 0`` when it could not judge) and
  ``--exit-codes nagios`` (:func:`nagios_status`).
"""

from __future__ import annotations

import os
import time
from typing import IO, TYPE_CHECKING

from ibdiag.cli.env import Session
from ibdiag.errors import ExitStatus, IbdiagError

if TYPE_CHECKING:
    from ibdiag.findings.model import Report

# What is written only when a run fails, asks for -o line/junit or --textfile is imported then: app.py
# loads this module for every run, `ibdiag --help` included (benchmarks/topo_startup.py).

#: ``--exit-codes nagios``: the Nagios plugin convention (gcm, NHC wrappers, Icinga, Sensu).
NAGIOS_OK, NAGIOS_WARNING, NAGIOS_CRITICAL, NAGIOS_UNKNOWN = 0, 1, 2, 3


def _silence(stream: IO[str]) -> None:
    """Point a stream whose reader went away at /dev/null, so the flush at exit cannot fail
    (Python docs, "Note on SIGPIPE"); a stream with no file descriptor is left alone."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def write_to(stream: IO[str], text: str) -> bool:
    """Write and flush; a reader that went away (``| head``, a closed stderr) changes nothing: False."""
    try:
        stream.write(text)
        stream.flush()
        return True
    except (OSError, ValueError):
        _silence(stream)
        return False


def error_text(message: str, hint: str | None) -> str:
    """The two lines every error is told in: ``ibdiag: error: ...`` and ``hint: ...``."""
    return f"ibdiag: error: {message}\n" + (f"hint: {hint}\n" if hint else "")


def write_error(session: Session, message: str, hint: str | None, status: int) -> int:
    """Say why the run ended with ``status`` (2, 3 or 130) in every form the run asked for."""
    from ibdiag.output.line import unknown_line  # lazy: an error's -o line only (start-up)

    env = session.env
    if status == ExitStatus.INTERRUPTED:
        write_to(env.stderr, "\nibdiag: interrupted\n")
    else:
        write_to(env.stderr, error_text(message, hint))
    session.errors.append(message)
    if session.line:
        write_to(env.stdout, unknown_line(message) + "\n")
    elif session.junit:
        write_to(env.stdout, _junit_error(session, message, hint, int(status)))
    return int(status)


def _junit_error(session: Session, message: str, hint: str | None, status: int) -> str:
    """CI still gets a report when the run could not judge: one ``<error>`` case."""
    # lazy: xml.etree and the envelope, for -o junit only (start-up)
    from ibdiag.findings.model import RunMeta
    from ibdiag.node.root import host_of  # lazy: as above
    from ibdiag.output.junit import render_junit_error  # lazy: as above

    meta = RunMeta.now(host_of(None))
    return render_junit_error(
        session.command or "ibdiag", meta, message, hint, status=status, time_s=session.elapsed()
    )


def write_warning(session: Session, message: str) -> None:
    write_to(session.env.stderr, f"ibdiag: warning: {message}\n")


def nagios_status(status: int, report: Report | None, strict: bool) -> int:
    """0 OK (nothing to report), 1 WARNING (warnings only), 2 CRITICAL (a failing finding: exit 1),
    3 UNKNOWN (usage error, could not run, interrupted: exit 2, 3, 130)."""
    if status == ExitStatus.FAILED:
        return NAGIOS_CRITICAL
    if status != ExitStatus.OK:
        return NAGIOS_UNKNOWN
    if (
        report is not None
        and not strict
        and any(f.severity.value == "warn" for f in report.findings)
    ):
        return NAGIOS_WARNING
    return NAGIOS_OK


def finish(session: Session, status: int) -> int:
    """The run is over with ``status``: write ``--textfile``, map ``--exit-codes``."""
    if session.textfile is not None:
        status = _write_textfile(session, status)
    if session.nagios:
        return nagios_status(status, session.report, session.strict)
    return status


def _write_textfile(session: Session, status: int) -> int:
    # lazy: the writer and the metrics, for --textfile only (start-up)
    from ibdiag.outfile import write_atomically
    from ibdiag.output.prom import render_prom, run_metrics  # lazy: as above

    assert session.textfile is not None
    command = session.command or "ibdiag"
    judged = status in (ExitStatus.OK, ExitStatus.FAILED) and session.prom_text is not None
    text = (
        session.prom_text
        if judged
        else render_prom(run_metrics(command, up=False, timestamp=time.time()))
    )
    try:
        write_atomically(session.textfile, text or "", "--textfile")
    except IbdiagError as e:
        if status in (ExitStatus.OK, ExitStatus.FAILED):
            return write_error(session, e.message, e.hint, e.exit_status)
        write_warning(session, e.message)
    return status
