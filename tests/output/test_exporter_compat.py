"""The recording rules that let an IB exporter's dashboards read ``ibdiag fabric``'s series (issue 38;
contrib/prometheus/ibdiag-exporter-compat.yml), checked by Debian's real ``promtool``: ``check
rules``, ``test rules`` on the shipped unit test, and on what a real node_exporter serves from the
textfile ``ibdiag fabric --textfile`` wrote for the bundled faulty fabric: every switch port under
treydock/infiniband_exporter's and guilbaults/infiniband-exporter's names, with their labels."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ibdiag.fabric.views.prom_metrics import EXPORTER_NAMES
from tests.output.test_prometheus import node_exporter, samples
from tests.support.env import FIXTURES, REPO, need_tool

RULES = REPO / "contrib" / "prometheus"
COMPAT = RULES / "ibdiag-exporter-compat.yml"
FAULTY = FIXTURES / "fabric" / "rail-fat-tree-faulty"


def _promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [need_tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_promtool_checks_and_unit_tests_the_compat_rules():
    res = _promtool("check", "rules", COMPAT.name)
    assert res.returncode == 0 and "SUCCESS: 43 rules found" in res.stdout, res.stdout + res.stderr
    res = _promtool("test", "rules", "ibdiag-exporter-compat.test.yml")
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


def test_every_counter_ibdiag_writes_has_its_two_names():
    text = COMPAT.read_text()
    for iba, name in EXPORTER_NAMES.items():
        assert f"record: infiniband_switch_{name}\n" in text, name  # treydock
        assert f"record: infiniband_{iba.lower()}_total\n" in text, iba  # guilbaults
        assert f"(ibdiag_fabric_switch_{name})" in text


def test_a_wrong_expectation_fails_the_unit_test(tmp_path):
    """The unit test can fail: the symbol errors expected at 58 instead of 57."""
    for name in ("ibdiag-exporter-compat.yml", "ibdiag-exporter-compat.test.yml"):
        (tmp_path / name).write_text((RULES / name).read_text())
    test = tmp_path / "ibdiag-exporter-compat.test.yml"
    test.write_text(test.read_text().replace("value: 57", "value: 58", 1))
    res = _promtool("test", "rules", test.name, cwd=tmp_path)
    assert res.returncode != 0


def _series_line(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{inner}}}"


@pytest.mark.slow
def test_node_exporters_textfile_of_a_real_fabric_reads_under_the_exporters_names(cli, tmp_path):
    """ibdiag fabric --textfile (the management host's one run) -> node_exporter's textfile
    collector -> the rules, evaluated by promtool on what node_exporter served."""
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    r = cli("fabric", "--from", FAULTY, "--textfile", textdir / "ibdiag-fabric.prom")
    assert r.exit_code == 1, r.stderr  # the faulty fabric: a 1x ISL
    with node_exporter("--collector.textfile", f"--collector.textfile.directory={textdir}") as text:
        parsed = samples(text)
    assert parsed[("node_textfile_scrape_error", ())] == 0
    ours = {k: v for k, v in parsed.items() if k[0].startswith("ibdiag_fabric_switch_port_")}
    symbol = [k for k in ours if k[0] == "ibdiag_fabric_switch_port_symbol_error_total"]
    assert len(symbol) == 96  # every cabled switch port of the fixture
    lines = [
        f"      - series: '{_series_line(n, labels)}'\n        values: \"{v:g}x10\""
        for (n, labels), v in ours.items()
    ]
    test = tmp_path / "served.test.yml"
    test.write_text(
        f"""rule_files:
  - {COMPAT}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
{chr(10).join(lines)}
    promql_expr_test:
      - expr: count(infiniband_switch_port_symbol_error_total)
        eval_time: 5m
        exp_samples:
          - value: 96
      - expr: count(infiniband_switch_uplink_info)
        eval_time: 5m
        exp_samples:
          - value: 96
      - expr: count(infiniband_symbolerrorcounter_total)
        eval_time: 5m
        exp_samples:
          - value: 96
      - expr: infiniband_switch_port_symbol_error_total > 0
        eval_time: 5m
        exp_samples:
          - labels: 'infiniband_switch_port_symbol_error_total{{guid="0xb8cef60300000003",port="3"}}'
            value: 57
      - expr: infiniband_switch_port_symbol_error_total * on(guid,port) group_left(switch, uplink, uplink_type) infiniband_switch_uplink_info > 0
        eval_time: 5m
        exp_samples:
          - labels: '{{guid="0xb8cef60300000003",port="3",switch="leaf-r2-1",uplink="gpu03 mlx5_2",uplink_type="CA"}}'
            value: 57
"""
    )
    res = _promtool("test", "rules", str(test), cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # the names the issue found stuttering are gone from what node_exporter serves
    assert not [n for n, _ in parsed if re.search(r"port_port_|_gbps$", n)]
