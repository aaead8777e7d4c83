"""Judging counters: snapshot rules, interval thresholds and rate limits, backpressure, RoCE, config."""

from __future__ import annotations

import itertools

import pytest

from ibdiag.config import load_config
from ibdiag.counters.checks import check_span
from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import build_span
from ibdiag.counters.read import discover_layout, read_sample
from ibdiag.counters.reading import reading_findings
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import PortsConfig
from ibdiag.topo.checks import check_topology
from tests.support.counters import node, write
from tests.support.env import SYSFS_FIXTURES


def problems(findings):
    return sorted(
        (f.severity.value, f.check, f.subject) for f in findings if f.severity is not Severity.OK
    )


def one(findings, check, subject):
    (f,) = [f for f in findings if f.check == check and f.subject == subject]
    return f


class Clock:
    """Monotonic time the test controls, so rates are exact (the reads themselves are real)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def span_after(root, change, *, seconds=10.0, cfg=None, ports=None):
    """Read ``root``, apply ``change()`` to its files, read again ``seconds`` later (clock injected)."""
    sysfs = SysfsRoot(root)
    layout = discover_layout(sysfs)
    clock = Clock()
    before = read_sample(sysfs, layout, monotonic=clock)
    change()
    clock.t += seconds
    after = read_sample(sysfs, discover_layout(sysfs), monotonic=clock)
    span = build_span([before, after], mode="interval")
    return span, check_span(span, cfg or CountersConfig(), ports)


# --- snapshot ----------------------------------------------------------------------------------------


def test_counters_faulty_fixture_snapshot_is_exactly_the_planted_faults():
    out = reading_findings(SysfsRoot(SYSFS_FIXTURES / "counters-faulty"))
    assert problems(out) == [
        ("fail", "counters.errors", "mlx5_1:1"),
        ("fail", "port.state", "mlx5_2:1"),
        ("warn", "counters.errors", "mlx5_2:1"),
        ("warn", "counters.roce_errors", "mlx5_4:1"),
        ("warn", "counters.unavailable", "mlx5_3:1"),
        ("warn", "counters.unavailable", "mlx5_5:1"),
        ("warn", "counters.xmit_wait", "mlx5_1:1"),
    ]
    errors = one(out, "counters.errors", "mlx5_1:1")
    for text in (
        "link_downed ≥255 (saturated, 8-bit)",
        "port_xmit_discards ≥65535",
        "excessive_buffer_overrun_errors ≥15",
        "symbol_error 4811",
    ):
        assert text in errors.message
    assert "perfquery -C mlx5_1 -P 1 -R" in errors.hint
    assert "N/A (no PMA)" in one(out, "counters.unavailable", "mlx5_5:1").message
    assert (
        one(out, "counters.roce_congestion", "mlx5_4:1").severity is Severity.OK
    )  # history, not now


def test_healthy_fixture_is_clean_and_faulty_dgx_matches_topo_port_findings():
    assert problems(reading_findings(SysfsRoot(SYSFS_FIXTURES / "dgx-h100"))) == []
    root = SYSFS_FIXTURES / "dgx-h100-faulty"
    ours = problems(reading_findings(SysfsRoot(root)))
    topo = problems(
        f
        for f in check_topology(discover(SysfsRoot(root)))
        if f.check in ("port.state", "port.rate")
    )
    assert ours == [(s, c.replace("topo.", "counters."), subj) for s, c, subj in topo]
    assert ours == [("fail", "port.rate", "mlx5_7:1"), ("fail", "port.state", "mlx5_10:1")]


def test_snapshot_of_a_tree_without_rdma_is_one_ok_finding():
    out = reading_findings(SysfsRoot(SYSFS_FIXTURES / "vm-no-rdma"))
    assert [(f.check, f.severity) for f in out] == [("counters.ports", Severity.OK)]


def test_snapshot_warns_on_nonzero_and_says_how_to_get_a_rate(tmp_path):
    node(tmp_path, {"counters": {"symbol_error": 3}})
    f = one(reading_findings(SysfsRoot(tmp_path)), "counters.errors", "mlx5_0:1")
    assert f.severity is Severity.WARN and "--interval" in f.hint and "--since" in f.hint


def test_lifespan_is_never_judged(tmp_path):
    node(tmp_path, {"hw": {"lifespan": 999999}})
    assert problems(reading_findings(SysfsRoot(tmp_path))) == []


# --- interval ------------------------------------------------------------------------------------------


def test_increase_below_threshold_warns_above_fails(tmp_path):
    node(tmp_path, {}, {})
    span, out = span_after(
        tmp_path,
        lambda: (
            write(tmp_path, "mlx5_0", "symbol_error", 5),
            write(tmp_path, "mlx5_1", "symbol_error", 11),
        ),
        seconds=10,
    )
    assert one(out, "counters.errors", "mlx5_0:1").severity is Severity.WARN
    f = one(out, "counters.errors", "mlx5_1:1")
    assert f.severity is Severity.FAIL and f.value == 11 and f.limit == 10
    assert "over the threshold of 10 per interval" in f.message


def test_rate_limit_fails_even_below_the_threshold(tmp_path):
    node(tmp_path, {})
    _, out = span_after(
        tmp_path, lambda: write(tmp_path, "mlx5_0", "port_rcv_errors", 8), seconds=0.5
    )  # 16/s
    f = one(out, "counters.errors", "mlx5_0:1")
    assert f.severity is Severity.FAIL and f.unit == "/s" and f.value == 16.0 and f.limit == 10.0


def test_link_downed_during_the_interval_is_a_flap_warning(tmp_path):
    node(tmp_path, {"counters": {"link_downed": 4}})
    _, out = span_after(tmp_path, lambda: write(tmp_path, "mlx5_0", "link_downed", 5))
    f = one(out, "counters.errors", "mlx5_0:1")
    assert f.severity is Severity.WARN and "link_downed +1" in f.message


def test_counter_saturating_during_the_interval_fails_without_a_delta(tmp_path):
    node(tmp_path, {"counters": {"link_downed": 250}})
    span, out = span_after(tmp_path, lambda: write(tmp_path, "mlx5_0", "link_downed", 255))
    assert span.totals[0].deltas["link_downed"] is None
    f = one(out, "counters.errors", "mlx5_0:1")
    assert f.severity is Severity.FAIL and "saturated at 255 (8-bit), no delta" in f.message


def test_reset_during_the_interval(tmp_path):
    node(tmp_path, {"counters": {"symbol_error": 40, "port_xmit_data": 10**9}})
    span, out = span_after(
        tmp_path,
        lambda: (
            write(tmp_path, "mlx5_0", "symbol_error", 2),
            write(tmp_path, "mlx5_0", "port_xmit_data", 100),
        ),
    )
    d = span.totals[0]
    assert (
        d.deltas["symbol_error"] == 2 and d.deltas["xmit_bytes"] == 400
    )  # from zero: lower bounds
    assert one(out, "counters.reset", "mlx5_0:1").severity is Severity.WARN
    assert "+2 or more" in one(out, "counters.errors", "mlx5_0:1").message


def test_xmit_wait_backpressure_estimate(tmp_path):
    node(tmp_path, {"counters": {"port_xmit_wait": 1000}}, {"counters": {"port_xmit_wait": 1000}})
    # mlx5_0: 62.5e6 counts in 10 s = 6.25e6/s x 8 B = 50 MB/s of a 50 GB/s port: 0.1 %.
    _, out = span_after(
        tmp_path,
        lambda: (
            write(tmp_path, "mlx5_0", "port_xmit_wait", 1000 + 62_500_000),
            write(tmp_path, "mlx5_1", "port_xmit_wait", 1500),
        ),
    )
    f = one(out, "counters.xmit_wait", "mlx5_0:1")
    assert f.severity is Severity.WARN and f.value == 62_500_000 and f.limit == 1000
    assert "est. 0.1% of the time" in f.message and "assuming 8 B per count" in f.message
    assert one(out, "counters.xmit_wait", "mlx5_1:1").severity is Severity.OK


def test_xmit_wait_bytes_per_count_is_configurable(tmp_path):
    node(tmp_path, {})
    cfg = CountersConfig(xmit_wait_bytes_per_count=80)
    _, out = span_after(
        tmp_path, lambda: write(tmp_path, "mlx5_0", "port_xmit_wait", 62_500_000), cfg=cfg
    )
    assert (
        "est. 1% of the time" in one(out, "counters.xmit_wait", "mlx5_0:1").message
    )  # 10x the default 0.1 %


def test_throughput_and_saturated_32bit_data_counters(tmp_path):
    node(
        tmp_path,
        {"counters": {"port_xmit_data": 0}},
        {"counters": {"port_xmit_data": 2**32 - 10}, "extended": False},
    )
    # mlx5_0: 12.5e9 words = 50e9 B in 10 s = 40 Gb/s of 400.
    _, out = span_after(
        tmp_path,
        lambda: (
            write(tmp_path, "mlx5_0", "port_xmit_data", 12_500_000_000),
            write(tmp_path, "mlx5_1", "port_xmit_data", 2**32 - 1),
        ),
    )
    f = one(out, "counters.throughput", "mlx5_0:1")
    assert (
        f.severity is Severity.OK
        and f.value == pytest.approx(40.0)
        and "(10% / 0% of 400 Gb/s)" in f.message
    )
    f = one(out, "counters.throughput", "mlx5_1:1")
    assert f.severity is Severity.WARN and "saturated at 4294967295 (32-bit)" in f.message


def test_roce_loss_warns_fails_above_rate_and_congestion_warns(tmp_path):
    eth = {"link_layer": "Ethernet", "rate": "200 Gb/sec (4X HDR)"}
    node(tmp_path, dict(eth), dict(eth), dict(eth))

    def change():
        write(tmp_path, "mlx5_0", "out_of_sequence", 3, hw=True)
        write(tmp_path, "mlx5_1", "local_ack_timeout_err", 500, hw=True)  # 50/s
        write(tmp_path, "mlx5_2", "np_ecn_marked_roce_packets", 9000, hw=True)
        write(tmp_path, "mlx5_2", "rp_cnp_handled", 800, hw=True)

    _, out = span_after(tmp_path, change)
    assert one(out, "counters.roce_errors", "mlx5_0:1").severity is Severity.WARN
    f = one(out, "counters.roce_errors", "mlx5_1:1")
    assert f.severity is Severity.FAIL and "PFC" in f.hint
    f = one(out, "counters.roce_congestion", "mlx5_2:1")
    assert (
        f.severity is Severity.WARN
        and "np_ecn_marked_roce_packets 900/s" in f.message
        and "not an error" in f.hint
    )
    assert one(out, "counters.roce_congestion", "mlx5_0:1").severity is Severity.OK
    assert one(out, "counters.roce_errors", "mlx5_2:1").severity is Severity.OK


def test_hw_counter_going_down_is_unknown_not_negative(tmp_path):
    node(tmp_path, {"hw": {"out_of_sequence": 100}})
    span, out = span_after(
        tmp_path, lambda: write(tmp_path, "mlx5_0", "out_of_sequence", 4, hw=True)
    )
    assert span.totals[0].deltas["out_of_sequence"] is None
    assert one(out, "counters.roce_errors", "mlx5_0:1").severity is Severity.OK
    assert one(out, "counters.reset", "mlx5_0:1").severity is Severity.WARN


def test_port_going_down_during_the_interval(tmp_path):
    node(tmp_path, {})

    def change():
        write(tmp_path, "mlx5_0", "", "1: DOWN", attr="state")
        write(tmp_path, "mlx5_0", "", "2: Polling", attr="phys_state")
        write(tmp_path, "mlx5_0", "link_downed", 1)

    _, out = span_after(tmp_path, change)
    assert problems(out) == [
        ("fail", "port.state", "mlx5_0:1"),
        ("warn", "counters.errors", "mlx5_0:1"),
    ]


def test_baseline_ports_gone_and_new(tmp_path):
    node(tmp_path, {}, {})
    sysfs = SysfsRoot(tmp_path)
    full = read_sample(sysfs, discover_layout(sysfs))
    only0 = read_sample(sysfs, discover_layout(sysfs, ["mlx5_0"]))
    out = check_span(build_span([full, only0], mode="since"))
    assert ("warn", "counters.baseline", "mlx5_1:1") in problems(out)
    later = read_sample(sysfs, discover_layout(sysfs))
    out = check_span(build_span([only0, later], mode="since"))
    assert ("warn", "counters.baseline", "mlx5_1:1") in problems(out)
    assert "not in the baseline" in one(out, "counters.baseline", "mlx5_1:1").message


# --- config ------------------------------------------------------------------------------------------------


def test_thresholds_ignore_lists_and_rate_limit_from_config(tmp_path):
    node(tmp_path, {}, {})
    cfg_file = tmp_path / "ibdiag.toml"
    cfg_file.write_text(
        "[counters]\nignore_adapters = ['mlx5_1:1']\nignore_counters = ['VL15_dropped']\nrate_limit_per_s = 1000\n"
        "[counters.thresholds]\nsymbol_error = 0\n"
    )
    loaded = load_config(cfg_file)
    cfg = loaded.section("counters", CountersConfig)
    assert (
        cfg.thresholds["symbol_error"] == 0 and cfg.thresholds["link_downed"] == 10
    )  # merged over the defaults
    ports = loaded.section(
        "ports", PortsConfig
    )  # [counters] ignore_adapters is read as [ports] ignore
    assert (
        ports.ignore == ("mlx5_1:1",)
        and "[counters] ignore_adapters is deprecated" in loaded.notes[0]
    )

    def change():
        write(tmp_path, "mlx5_0", "symbol_error", 1)
        write(tmp_path, "mlx5_0", "VL15_dropped", 5000)
        write(tmp_path, "mlx5_1", "symbol_error", 5000)

    _, out = span_after(tmp_path, change, cfg=cfg, ports=ports)
    assert problems(out) == [("fail", "counters.errors", "mlx5_0:1")]
    assert "VL15_dropped" not in one(out, "counters.errors", "mlx5_0:1").message
    assert not [f for f in out if f.subject == "mlx5_1:1"]


@pytest.mark.parametrize(
    "toml,needle",
    [
        ("[counters.thresholds]\nsymbol_errors = 5\n", "unknown key symbol_errors"),
        ("[counters.thresholds]\nsymbol_error = -1\n", "negative"),
        ("[counters]\nextended_counters = 'maybe'\n", "extended_counters"),
        ("[counters]\nignore_counters = ['symbol_errors']\n", "unknown counter"),
        ("[counters]\nxmit_wait_bytes_per_count = 0\n", "xmit_wait_bytes_per_count"),
        ("[counters]\nprom_names = 'other'\n", "prom_names"),
        ("[counters]\nrate_limit = 5\n", "unknown key rate_limit"),
    ],
)
def test_bad_config_is_refused_with_a_hint(tmp_path, toml, needle):
    p = tmp_path / "c.toml"
    p.write_text(toml)
    with pytest.raises(InputError) as e:
        load_config(p).section("counters", CountersConfig)
    assert needle in e.value.message and e.value.hint


def test_every_default_threshold_is_a_counter_the_spec_knows():
    from ibdiag.counters.config import IBDIAGS_THRESHOLDS, RATE_LIMITED
    from ibdiag.counters.spec import ERROR_COUNTERS

    assert set(IBDIAGS_THRESHOLDS) == {*ERROR_COUNTERS, "port_xmit_wait"}
    assert set(RATE_LIMITED) <= set(ERROR_COUNTERS)
    # infiniband-diags' defaults as issue 3 lists them.
    assert [
        IBDIAGS_THRESHOLDS[k]
        for k in (
            "symbol_error",
            "port_rcv_remote_physical_errors",
            "VL15_dropped",
            "port_xmit_wait",
        )
    ] == [10, 100, 100, 1000]


def test_one_finding_per_check_and_port(tmp_path):
    node(tmp_path, {"link_layer": "Ethernet", "hw": {}}, {})
    _, out = span_after(
        tmp_path,
        lambda: (
            write(tmp_path, "mlx5_0", "symbol_error", 20),
            write(tmp_path, "mlx5_0", "link_downed", 2),
        ),
    )
    keys = [(f.check, f.subject) for f in out]
    assert len(keys) == len(set(keys))
    # and every check id is in the documented list
    import ibdiag.counters.checks as checks_mod

    for check, _ in keys:
        assert f"``{check}``" in checks_mod.__doc__, check
    assert set(itertools.chain(keys)) >= {
        ("counters.errors", "mlx5_0:1"),
        ("counters.xmit_wait", "mlx5_1:1"),
    }


def test_unreadable_counters_are_not_reported_as_zero(tmp_path):
    node(tmp_path, {"counters": {n: "N/A (no PMA)" for n in ("symbol_error", "link_downed")}})
    out = reading_findings(SysfsRoot(tmp_path))
    assert "all 10 error counters are 0" in one(out, "counters.errors", "mlx5_0:1").message
    assert one(out, "counters.unavailable", "mlx5_0:1").severity is Severity.WARN
    _, out = span_after(tmp_path, lambda: None)
    assert "(10 checked)" in one(out, "counters.errors", "mlx5_0:1").message


def test_port_with_every_counter_na_has_no_errors_finding():
    out = reading_findings(SysfsRoot(SYSFS_FIXTURES / "counters-faulty"))
    assert not [f for f in out if f.check == "counters.errors" and f.subject == "mlx5_5:1"]
