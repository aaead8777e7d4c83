"""Float flags are decimal numbers in ASCII (issue 28, case 10; decided: refuse). ``float()`` accepted
``1_000`` and full-width digits (``１０``) in ``--interval`` and every other float flag; they now go
through one parser, :func:`ibdiag.parse.parse_decimal`, and are a usage error. ``inf``, ``nan`` and
``1e400`` reach each flag's own range check, which refuses them naming the flag."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES

ROOT = str(SYSFS_FIXTURES / "dgx-h100")


@pytest.mark.parametrize("value", ["1_000", "１０", "inf", "nan", "0x10", "1e400"])
def test_a_float_flag_is_ascii_decimal_only(value):
    res = run_cli("counters", "--root", ROOT, "--interval", value, "--count", "1")
    assert res.exception is None, res.exception
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    assert "--interval" in res.stderr


@pytest.mark.parametrize("value", ["3_60", "３６０"])
def test_verdict_busbw_is_ascii_decimal_only(value):
    args = ["verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "512", "--compute-s", "2"]
    res = run_cli(*args, "--busbw", value)
    assert res.exit_code == 2 and "--busbw" in res.stderr, res.stderr


def test_plain_decimals_still_work():
    args = ["verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "512", "--compute-s", "2"]
    assert run_cli(*args, "--busbw", "360").exit_code in (0, 1)
    assert run_cli(*args, "--busbw", "3.6e2").exit_code in (0, 1)
