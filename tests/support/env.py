"""Where the tests run: the repository's paths, and skipping (or, in CI, failing) what cannot run here.

``need_root()`` / ``need_tool(name)`` skip a test that cannot run here — except under
``IBDIAG_TEST_STRICT=1`` (set by .ci/run), where a missing privilege or tool fails the test, so CI
never passes by skipping the real thing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
SYSFS_FIXTURES = FIXTURES / "sysfs"
STRICT = os.environ.get("IBDIAG_TEST_STRICT", "") not in ("", "0")


def unavailable(reason: str) -> None:
    """Skip the test for ``reason``; fail it instead under ``IBDIAG_TEST_STRICT=1``."""
    if STRICT:
        pytest.fail(f"IBDIAG_TEST_STRICT=1 and {reason}")
    pytest.skip(reason)


def need_root() -> None:
    if os.geteuid() != 0:
        unavailable("this test needs root (network namespaces, tc)")


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (make system-deps)")
    return path  # type: ignore[return-value]
