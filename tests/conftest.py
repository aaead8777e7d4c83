"""The suite's fixtures; the helpers behind them live in ``tests/support/``.

* ``cli`` runs ``ibdiag`` in-process through its boundary ``main(argv, env)`` and returns exit code,
  stdout, stderr (``tests.support.cli.run_cli`` takes a fake terminal, a width and stdin too).
* ``ibdiag_exe`` is the installed console script, for the few real subprocess runs.
* ``fixture_root`` names a bundled sysfs fixture; ``fleet_dir`` is the fixture fleet of the
  ``ibdiag report`` tests (``tests.support.fleet_fixtures``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES

# the fixture fleet of the ibdiag report tests, made a fixture by importing it here
from tests.support.fleet_fixtures import fleet_dir  # noqa: F401


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
