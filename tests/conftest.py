"""Shared test helpers.

* ``cli`` runs ``ibdiag`` in-process through its boundary ``main(argv, env)`` and returns exit code,
  stdout, stderr (``run_cli`` takes a fake terminal, a width and stdin too).
* ``ibdiag_exe`` is the installed console script, for the few real subprocess runs.
* ``need_root()`` / ``need_tool(name)`` skip a test that cannot run here — except under
  ``IBDIAG_TEST_STRICT=1`` (set by .ci/run), where a missing privilege or tool fails the test, so CI
  never passes by skipping the real thing.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
SYSFS_FIXTURES = FIXTURES / "sysfs"
STRICT = os.environ.get("IBDIAG_TEST_STRICT", "") not in ("", "0")


def _unavailable(reason: str) -> None:
    if STRICT:
        pytest.fail(f"IBDIAG_TEST_STRICT=1 and {reason}")
    pytest.skip(reason)


def need_root() -> None:
    if os.geteuid() != 0:
        _unavailable("this test needs root (network namespaces, tc)")


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        _unavailable(f"{name} is not installed (make system-deps)")
    return path  # type: ignore[return-value]


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
    captured streams; ``env`` is added to this process's environment for the run only."""
    from ibdiag.cli.env import Environment
    from ibdiag.cli.main import main

    out = FakeTerminal() if stdout_tty else io.StringIO()
    err = FakeTerminal() if stderr_tty else io.StringIO()
    environ = {**os.environ, **(env or {})}
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
    except Exception as e:  # noqa: BLE001 - a bug escaping the boundary: the test sees it
        exc, status = e, -1
    return CliResult(status, out.getvalue(), err.getvalue(), exc)


@pytest.fixture
def cli():
    """``cli("topo", "--root", path)`` -> CliResult, running ``ibdiag`` in-process (run_cli)."""
    return run_cli


@pytest.fixture(scope="session")
def ibdiag_exe() -> str:
    exe = Path(sys.executable).parent / "ibdiag"
    if not exe.exists():
        found = shutil.which("ibdiag")
        if not found:
            pytest.fail("the ibdiag console script is not installed (make test installs it)")
        return found
    return str(exe)


@pytest.fixture
def fixture_root():
    """``fixture_root("dgx-h100")`` -> Path of a bundled sysfs fixture."""

    def get(name: str) -> Path:
        p = SYSFS_FIXTURES / name
        assert (p / "sys").is_dir(), f"no fixture {name}"
        return p

    return get


# the fixture fleet of the ibdiag report tests, made a fixture by importing it here
from tests.fleet_fixtures import fleet_dir  # noqa: E402,F401
