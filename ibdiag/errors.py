"""Exit statuses and the errors every layer below ``cli/`` raises instead of printing or exiting.

The statuses keep Kubernetes node-problem-detector semantics (0 OK, 1 problem, anything else
unknown) and let a Slurm HealthCheckProgram tell "node is bad" (1) from "check is broken" (2/3).
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    """No failing finding (warnings allowed unless ``--strict``)."""
    FAILED = 1
    """At least one failing finding."""
    USAGE = 2
    """Usage error or unreadable/malformed input."""
    CANNOT_RUN = 3
    """Could not run: no device, peer unreachable, permission denied, timeout."""
    INTERRUPTED = 130
    """Interrupted (Ctrl-C / SIGINT), as a shell reports 128 + SIGINT."""


EXIT_STATUS_TABLE: tuple[tuple[int, str], ...] = (
    (ExitStatus.OK, "no failing finding"),
    (ExitStatus.FAILED, "at least one failing finding (warnings too with --strict)"),
    (ExitStatus.USAGE, "usage error or unreadable input"),
    (
        ExitStatus.CANNOT_RUN,
        "could not run: no device, peer unreachable, permission denied, timeout",
    ),
    (ExitStatus.INTERRUPTED, "interrupted"),
)


class IbdiagError(Exception):
    """An error a user can act on: a one-line message and a hint.

    The CLI prints ``ibdiag: error: <message>`` and ``hint: <hint>`` on stderr and exits with
    ``exit_status``; a traceback appears only with ``--debug``.
    """

    exit_status: ExitStatus = ExitStatus.CANNOT_RUN

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(IbdiagError):
    """A bad option value or combination (exit 2)."""

    exit_status = ExitStatus.USAGE


class InputError(IbdiagError):
    """An input file or tree that is missing, unreadable or malformed (exit 2)."""

    exit_status = ExitStatus.USAGE


class CannotRunError(IbdiagError):
    """The check could not run here: no device, peer unreachable, permission denied (exit 3)."""

    exit_status = ExitStatus.CANNOT_RUN


class PeerTimeoutError(CannotRunError):
    """A peer did not answer within the timeout (exit 3); the message names what was awaited."""


class NotSupportedError(CannotRunError):
    """A path ibdiag does not implement (yet); the message says which (exit 3)."""


#: Optional dependency -> the extra of pyproject.toml that installs it. A health-check node installs
#: ibdiag alone (topo, counters, snapshot, bench p2p: about 50 MB with its venv); the management host
#: adds what fabric and report need (networkx, pandas and numpy: about 180 MB more).
EXTRAS = {"networkx": "fabric", "pandas": "report", "matplotlib": "chart", "torch": "collective"}


def missing_extra(module: str, needs: str) -> NotSupportedError:
    """The error (exit 3) for ``needs`` (``ibdiag fabric``) run where ``module`` is not installed,
    naming the extra that installs it for each way ibdiag is installed."""
    extra = EXTRAS[module]
    return NotSupportedError(
        f"{needs} needs {module}, which this installation of ibdiag leaves out",
        hint=f"install the extra: pip install 'ibdiag[{extra}]' (in ibdiag's venv: <venv>/bin/pip "
        f"install 'ibdiag[{extra}]'; pipx: pipx inject ibdiag {module})",
    )
