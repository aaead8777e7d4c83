"""JUnit (#11) read back by junitparser: host in the suite name, warnings visible, an <error> case when
the run could not judge, time attributes."""

from __future__ import annotations

from junitparser import Error, Failure, JUnitXml, Skipped

from tests.support.env import SYSFS_FIXTURES

F = SYSFS_FIXTURES


def _suites(text: str):
    xml = JUnitXml.fromstring(text.split("\n", 1)[1])
    return list(xml) if isinstance(xml, JUnitXml) else [xml]


def _results(case):
    return [type(r) for r in case.result]


def test_failing_node_host_in_suite_and_times(cli):
    res = cli("topo", "--root", F / "dgx-h100-faulty", "-o", "junit")
    assert res.exit_code == 1
    (suite,) = _suites(res.stdout)
    assert suite.name == "ibdiag.topo@dgx-h100-07" and suite.hostname == "dgx-h100-07"
    assert suite.failures == 3 and suite.errors == 0 and suite.time >= 0
    cases = list(suite)
    assert all(c.time == 0 for c in cases)  # a finding has no duration of its own
    failed = {f"{c.classname}:{c.name}" for c in cases if Failure in _results(c)}
    assert failed == {"topo.pcie_width:mlx5_6", "port.rate:mlx5_7:1", "port.state:mlx5_10:1"}


def test_warnings_are_visible_without_failing(cli):
    res = cli("topo", "--root", F / "gpu-no-mlx5", "-o", "junit")
    assert res.exit_code == 0
    (suite,) = _suites(res.stdout)
    (warned,) = [c for c in suite if Skipped in _results(c)]
    assert warned.classname == "topo.adapters" and warned.result[0].message.startswith(
        "WARN: 8 GPU(s) but no RDMA adapter"
    )
    assert suite.skipped == 1 and suite.failures == 0
    strict = cli("topo", "--root", F / "gpu-no-mlx5", "-o", "junit", "--strict")
    (suite,) = _suites(strict.stdout)
    assert strict.exit_code == 1 and suite.failures == 1 and suite.skipped == 0


def test_exit_2_and_3_still_give_a_report_with_one_error_case(cli, tmp_path):
    for argv, status in (
        (["counters", "--root", F / "vm-no-rdma"], 3),
        (["topo", "--root", tmp_path / "missing"], 2),
        (["topo", "--nope"], 2),
    ):
        res = cli(*argv, "-o", "junit")
        assert res.exit_code == status and "ibdiag: error:" in res.stderr
        (suite,) = _suites(res.stdout)
        assert (
            suite.errors == 1 and suite.tests == 1 and suite.name.startswith(f"ibdiag.{argv[0]}@")
        )
        (case,) = list(suite)
        (err,) = case.result
        assert isinstance(err, Error) and err.type == f"exit {status}" and err.message
