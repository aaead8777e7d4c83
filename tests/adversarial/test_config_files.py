"""Config files that would switch checks off, fail every port or crash the loader: each is exit 2 with
a message naming the key and value, through the real commands."""

from __future__ import annotations

import pytest

from tests.support.env import SYSFS_FIXTURES

ROOT = SYSFS_FIXTURES / "dgx-h100"


def run(cli, tmp_path, body: str | bytes, cmd=("topo",)):
    p = tmp_path / "c.toml"
    if isinstance(body, bytes):
        p.write_bytes(body)
    else:
        p.write_text(body)
    return cli(*cmd, "--root", ROOT, "--config", p), p


@pytest.mark.parametrize(
    "body, cmd, words",
    [
        (
            "[topo]\nexpected_rate_gbps = nan\n",
            ("topo",),
            "[topo] expected_rate_gbps = nan is not a finite number",
        ),
        (
            "[topo]\nexpected_rate_gbps = inf\n",
            ("topo",),
            "[topo] expected_rate_gbps = inf is not a finite number",
        ),
        (
            "[topo]\nexpected_rate_gbps = -inf\n",
            ("topo",),
            "expected_rate_gbps = -inf is not a finite number",
        ),
        (
            "[topo]\nexpected_rate_gbps = 1e6\n",
            ("topo",),
            "[topo] expected_rate_gbps = 1000000.0 must be at most 2400",
        ),
        (
            "[topo]\nexpected_rate_gbps = 0\n",
            ("topo",),
            "[topo] expected_rate_gbps = 0 must be above 0",
        ),
        (
            "[counters]\nexpected_rate_gbps = nan\n",
            ("counters",),
            "[counters] expected_rate_gbps = nan is not a finite number",
        ),
        (
            "[counters]\nrate_limit_per_s = nan\n",
            ("counters",),
            "[counters] rate_limit_per_s = nan is not a finite number",
        ),
        (
            "[counters.thresholds]\nsymbol_error = -5\n",
            ("counters",),
            "[counters] thresholds.symbol_error = -5 must not be negative",
        ),
        (
            "[counters.thresholds]\nsymbol_error = 1000000000000000000000000000000\n",
            ("counters",),
            "thresholds.symbol_error = 1000000000000000000000000000000 does not fit a 64-bit integer",
        ),
        (
            "[topo]\nexpect_adapters = -1\n",
            ("topo",),
            "[topo] expect_adapters = -1 must not be negative",
        ),
        (
            "[verdict]\nlatency_us = nan\n",
            (
                "verdict",
                "--params",
                "8e9",
                "--dtype",
                "bf16",
                "--ranks",
                "16",
                "--compute-s",
                "2",
                "--busbw",
                "40",
            ),
            "[verdict] latency_us = nan is not a finite number",
        ),
        (
            '[topo]\ngdr_level = "PXB\\u001b[2J"\n',
            ("topo",),
            "[topo] gdr_level = 'PXB\\x1b[2J' is not a plain one-line string",
        ),
        (
            '[topo]\nignore_adapters = ["' + "x" * 5000 + '"]\n',
            ("topo",),
            "is not a plain one-line string of at most 4096 characters",
        ),
        ('[topo]\n"evil\\u001b[31m" = 1\n', ("topo",), "unknown key evil\\x1b[31m"),
    ],
)
def test_bad_values_are_exit_2_naming_key_and_value(cli, tmp_path, body, cmd, words):
    res, path = run(cli, tmp_path, body, cmd)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert words in res.stderr and str(path) in res.stderr and "hint:" in res.stderr
    assert (
        "Traceback" not in res.stderr
        and "internal error" not in res.stderr
        and "\x1b" not in res.stderr
    )


@pytest.mark.parametrize(
    "body, words",
    [
        (bytes(range(256)) * 4, "not UTF-8 text"),
        (b"\x7fELF\x02\x01\x01\x00" + bytes(64), "not valid TOML"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("a = " + "{b = " * 500 + "1" + "}" * 500 + "\n", "nested too deeply"),
        (
            "[topo]\nignore_adapters = " + "[" * 20 + "]" * 20 + "\n",
            "nested more than 16 levels deep",
        ),
        ("[" + ".".join(["t"] * 40) + "]\n", "nested more than 16 levels deep"),
        ("# " + "x" * (2**20) + "\n", "more than 1024 KiB"),
    ],
)
def test_binary_huge_and_deeply_nested_files_are_exit_2(cli, tmp_path, body, words):
    res, path = run(cli, tmp_path, body)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert words in res.stderr and "hint:" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr) < 1000 and "\x00" not in res.stderr


def test_a_directory_as_config_is_exit_2(cli, tmp_path):
    res = cli("topo", "--root", ROOT, "--config", tmp_path)
    assert res.exit_code == 2 and "is a directory" in res.stderr


def test_good_values_still_load(cli, tmp_path):
    res, _ = run(
        cli,
        tmp_path,
        "[topo]\nexpected_rate_gbps = 400\nexpect_adapters = 12\n[counters.thresholds]\nsymbol_error = 0\n",
    )
    assert res.exit_code in (0, 1) and "error" not in res.stderr


def test_a_field_declares_its_own_range():
    from dataclasses import dataclass

    from ibdiag.config import bounded, build_dataclass
    from ibdiag.errors import InputError

    @dataclass(frozen=True)
    class Demo:
        share: float = bounded(0.5, low=0, low_open=True, high=1)
        offset_s: float = bounded(0.0, low=None)
        count: int = 1
        limits: dict[str, int] = bounded(high=100, default_factory=lambda: {"a": 1})

    assert (
        build_dataclass(
            Demo, {"share": 1, "offset_s": -3.5, "limits": {"a": 100}}, where="[x]"
        ).offset_s
        == -3.5
    )
    for table, words in (
        ({"share": 0}, "share = 0 must be above 0"),
        ({"share": 1.5}, "share = 1.5 must be at most 1"),
        ({"count": -1}, "count = -1 must not be negative"),
        ({"limits": {"a": 101}}, "limits.a = 101 must be at most 100"),
    ):
        with pytest.raises(InputError, match=words.replace(".", r"\.")):
            build_dataclass(Demo, table, where="[x]")
