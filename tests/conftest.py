"""Shared test helpers.

* ``cli`` runs the typer app in-process (typer's CliRunner) and returns exit code, stdout, stderr.
* ``ibdiag_exe`` is the installed console script, for the few real subprocess runs.
* ``need_root()`` / ``need_tool(name)`` skip a test that cannot run here — except under
  ``IBDIAG_TEST_STRICT=1`` (set by .ci/run), where a missing privilege or tool fails the test, so CI
  never passes by skipping the real thing.
"""

from __future__ import annotations

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


@pytest.fixture
def cli():
    """``cli("topo", "--root", path)`` -> CliResult, running ``ibdiag`` in-process."""
    from typer.testing import CliRunner

    from ibdiag.cli import app

    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> CliResult:
        res = runner.invoke(app, [str(a) for a in args], env=env, input=input, catch_exceptions=True)
        exc = res.exception if res.exception and not isinstance(res.exception, SystemExit) else None
        return CliResult(res.exit_code, res.stdout, res.stderr, exc)

    return run


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


from tests.fleet_fixtures import fleet_dir  # noqa: E402,F401  (the fixture fleet of the ibdiag report tests)
