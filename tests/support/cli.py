"""``ibdiag`` in-process: ``run_cli`` runs it through its boundary ``main(argv, env)`` and returns exit
code, stdout, stderr (with a fake terminal, a width and stdin when asked). The ``cli`` fixture
(tests/conftest.py) hands it to a test.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None


class FakeTerminal(io.StringIO):
    """A captured stream that says it is a terminal (for ``--watch`` and progress lines in-process)."""

    def isatty(self) -> bool:
        return True


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    stdout_tty: bool = False,
    stderr_tty: bool = False,
    columns: int | None = None,
) -> CliResult:
    """Run ``ibdiag ARGS`` in-process through the boundary, ``ibdiag.cli.main.main(argv, env)``, with
    captured streams; ``env`` is added to this process's environment (less its ``NCCL_*``) for the run only."""
    from ibdiag.cli.env import Environment
    from ibdiag.cli.main import main

    out = FakeTerminal() if stdout_tty else io.StringIO()
    err = FakeTerminal() if stderr_tty else io.StringIO()
    # NCCL_* of the machine running the tests (a CUDA container sets some) would be judged by topo's
    # configuration checks against the fixtures: a test hands in the ones it means.
    host = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    environ = {**host, **(env or {})}
    environ = {k: v for k, v in environ.items() if v is not None}
    environment = Environment(
        stdin=io.StringIO(input or ""),
        stdout=out,
        stderr=err,
        stdout_isatty=stdout_tty,
        stderr_isatty=stderr_tty,
        columns=columns,
        environ=environ,
        debug=environ.get("IBDIAG_DEBUG", "") not in ("", "0"),
    )
    exc: BaseException | None = None
    try:
        status = int(main([str(a) for a in args], environment))
    except SystemExit as e:  # only shell completion exits from inside click
        status = int(e.code or 0) if not isinstance(e.code, str) else 1
    except Exception as e:  # a bug escaping the boundary: the test sees it
        exc, status = e, -1
    return CliResult(status, out.getvalue(), err.getvalue(), exc)
