"""Deltas: saturation and resets (never negative), series totals, rates and the throughput figures."""

from __future__ import annotations

import pytest

from ibdiag.counters.delta import (
    Accumulator,
    build_span,
    counter_delta,
    figures,
    port_delta,
    sample_deltas,
)
from ibdiag.counters.model import PortCounters, PortDelta, Sample
from ibdiag.counters.read import discover_layout, read_sample
from ibdiag.errors import InputError
from ibdiag.node.sysfs import SysfsRoot
from tests.support.counters import node, write


def pc(counters=None, hw=None, saturated=(), bits=64, port=1):
    counters = counters if counters is not None else {}
    return PortCounters(
        adapter="mlx5_0",
        port=port,
        info=None,
        counters=counters,
        hw_counters=hw,
        saturated=frozenset(saturated),
        data_bits=bits,
        xmit_bytes=None
        if counters.get("port_xmit_data") is None
        else counters["port_xmit_data"] * 4,
        rcv_bytes=None if counters.get("port_rcv_data") is None else counters["port_rcv_data"] * 4,
    )


@pytest.mark.parametrize(
    "before,after,sb,sa,saturating,expected",
    [
        (10, 25, False, False, True, (15, None, False)),
        (10, 10, False, False, True, (0, None, False)),
        (10, 3, False, False, True, (3, None, True)),  # reset: counted from zero, a lower bound
        (10, 3, False, False, False, (None, "reset", True)),  # hw_counters: reset or wrap, unknown
        (65535, 65535, True, True, True, (None, "saturated", False)),
        (
            60000,
            65535,
            False,
            True,
            True,
            (None, "saturated", False),
        ),  # saturated during the interval
        (65535, 4, True, False, True, (4, None, True)),  # saturated, then reset: from zero again
        (None, 4, False, False, True, (None, "unavailable", False)),
        (4, None, False, False, True, (None, "unavailable", False)),
    ],
)
def test_counter_delta(before, after, sb, sa, saturating, expected):
    assert (
        counter_delta(before, after, saturated_before=sb, saturated_after=sa, saturating=saturating)
        == expected
    )


def test_port_delta_never_negative_and_marks_resets():
    before = pc(
        {"symbol_error": 50, "port_xmit_data": 1000, "link_downed": 255},
        hw={"out_of_sequence": 90},
        saturated={"link_downed"},
    )
    after = pc(
        {"symbol_error": 2, "port_xmit_data": 3500, "link_downed": 255},
        hw={"out_of_sequence": 5},
        saturated={"link_downed"},
    )
    d = port_delta(before, after, 2.0)
    assert d.deltas["symbol_error"] == 2 and "symbol_error" in d.resets
    assert d.deltas["port_xmit_data"] == 2500 and d.deltas["xmit_bytes"] == 10000
    assert d.rates["xmit_bytes"] == 5000.0
    assert d.deltas["link_downed"] is None and d.unknown["link_downed"] == "saturated"
    assert d.deltas["out_of_sequence"] is None and d.unknown["out_of_sequence"] == "reset"
    assert all(v is None or v >= 0 for v in d.deltas.values())


def test_saturated_data_counter_makes_bytes_unknown():
    before = pc({"port_xmit_data": 2**32 - 1}, saturated={"port_xmit_data"}, bits=32)
    after = pc({"port_xmit_data": 2**32 - 1}, saturated={"port_xmit_data"}, bits=32)
    d = port_delta(before, after, 1.0)
    assert d.deltas["xmit_bytes"] is None and d.unknown["xmit_bytes"] == "saturated"


def test_later_read_proving_64bit_clears_false_saturation():
    before = pc({"port_xmit_data": 2**32 - 1}, saturated={"port_xmit_data"}, bits=32)
    after = pc({"port_xmit_data": 2**32 + 99}, bits=64)
    assert port_delta(before, after, 1.0).deltas["port_xmit_data"] == 100


def test_no_baseline_for_a_new_port_or_counter():
    d = port_delta(None, pc({"symbol_error": 3}), 1.0)
    assert d.deltas == {"symbol_error": None} and d.unknown == {"symbol_error": "no baseline"}
    d = port_delta(pc({}), pc({"symbol_error": 3}), 1.0)
    assert d.unknown == {"symbol_error": "no baseline"}


def test_sample_deltas_refuses_a_baseline_from_the_future():
    a = Sample(1000.0, None, (pc({"symbol_error": 1}),))
    b = Sample(999.0, None, (pc({"symbol_error": 1}),))
    with pytest.raises(InputError):
        sample_deltas(a, b)


def test_sample_deltas_reports_ports_that_went_away():
    a = Sample(1.0, 1.0, (pc({}), pc({}, port=2)))
    b = Sample(2.0, 2.0, (pc({}),))
    deltas, missing = sample_deltas(a, b)
    assert missing == ("mlx5_0:2",) and len(deltas) == 1


def _step(values, seconds, unknown=None, resets=()):
    deltas = dict(values)
    rates = {k: (None if v is None else v / seconds) for k, v in deltas.items()}
    return PortDelta("mlx5_0", 1, seconds, deltas, rates, dict(rates), unknown or {}, tuple(resets))


def _series(*readings):
    """Samples of one port from ``(seconds, counters, saturated)`` readings."""
    return [Sample(t, t, (pc(c, saturated=sat),)) for t, c, sat in readings]


def test_accumulator_sums_known_steps_and_keeps_peaks():
    wait_max = 2**32 - 1
    first, *rest = _series(
        (0.0, {"symbol_error": 0, "port_xmit_wait": 0}, ()),
        (1.0, {"symbol_error": 2, "port_xmit_wait": 10}, ()),
        (2.0, {"symbol_error": 32, "port_xmit_wait": wait_max}, {"port_xmit_wait"}),
        (
            4.0,
            {"symbol_error": 0, "port_xmit_wait": wait_max},
            {"port_xmit_wait"},
        ),  # reset; wait still saturated
    )
    acc = Accumulator(first, mode="series")
    steps = [acc.add(s) for s in rest]
    assert [s.deltas[0].deltas["symbol_error"] for s in steps] == [2, 30, 0] and [
        s.elapsed_s for s in steps
    ] == [1.0, 2.0, 4.0]
    (total,) = acc.span().totals
    assert total.interval_s == 4.0 and total.samples == 3
    assert total.deltas["symbol_error"] == 32 and total.rates["symbol_error"] == 8.0
    assert total.peak_rates["symbol_error"] == 30.0
    assert (
        total.deltas["port_xmit_wait"] == 10
        and total.unknown["port_xmit_wait"] == "partly saturated"
    )
    assert total.resets == ("symbol_error",)


def test_accumulator_unknown_when_no_step_knew():
    first, after = _series(
        (0.0, {"link_downed": 255}, {"link_downed"}), (1.0, {"link_downed": 255}, {"link_downed"})
    )
    acc = Accumulator(first, mode="interval")
    acc.add(after)
    (total,) = acc.span().totals
    assert total.deltas["link_downed"] is None and total.unknown["link_downed"] == "saturated"


def test_a_reset_between_samples_counts_from_zero_in_every_mode():
    """Issue 13's second wrong answer: 100 -> 0 (reset) -> 150 was +150 with the reset flagged through
    --interval --count, and +50 with no reset through --watch (which compared the first sample with
    the last). Every mode totals through the one Accumulator now."""
    samples = _series(
        (0.0, {"symbol_error": 100}, ()),
        (1.0, {"symbol_error": 0}, ()),
        (2.0, {"symbol_error": 150}, ()),
    )
    acc = Accumulator(samples[0], mode="interval", keep_steps=False)  # --watch keeps no steps
    totals = []
    for s in samples[1:]:
        acc.add(s)
        totals.append(acc.span().total(("mlx5_0", 1)))
    assert [(t.deltas["symbol_error"], t.resets) for t in totals] == [
        (0, ("symbol_error",)),
        (150, ("symbol_error",)),
    ]
    series = build_span(samples, mode="series").total(("mlx5_0", 1))
    assert (series.deltas["symbol_error"], series.resets) == (150, ("symbol_error",))


def test_figures_throughput_utilisation_and_wait_estimate():
    d = _step(
        {"xmit_bytes": 25_000_000_000, "rcv_bytes": 12_500_000_000, "port_xmit_wait": 625_000_000},
        1.0,
    )
    f = figures(d, 400.0, xmit_wait_bytes_per_count=8)
    assert f.tx_gbps == pytest.approx(200.0) and f.rx_gbps == pytest.approx(100.0)
    assert f.tx_util_pct == pytest.approx(50.0) and f.rx_util_pct == pytest.approx(25.0)
    # 625e6 counts x 8 B = 5e9 B of the 50e9 B a 400 Gb/s port moves per second: 10 %.
    assert f.xmit_wait_est_pct == pytest.approx(10.0)
    assert figures(d, None, xmit_wait_bytes_per_count=8).xmit_wait_est_pct is None


def test_build_span_through_real_reads(tmp_path):
    node(tmp_path, {"counters": {"symbol_error": 5, "port_xmit_data": 1000}}, {})
    sysfs = SysfsRoot(tmp_path)
    layout = discover_layout(sysfs)
    s0 = read_sample(sysfs, layout)
    write(tmp_path, "mlx5_0", "symbol_error", 9)
    write(tmp_path, "mlx5_0", "port_xmit_data", 1250)
    s1 = read_sample(sysfs, layout)
    write(tmp_path, "mlx5_0", "symbol_error", 1)  # reset, then one more error
    s2 = read_sample(sysfs, layout)
    span = build_span([s0, s1, s2], mode="series")
    total = span.total(("mlx5_0", 1))
    assert span.samples_count == 2 and len(span.steps) == 2
    assert total.deltas["symbol_error"] == 5 and total.resets == ("symbol_error",)
    assert total.deltas["xmit_bytes"] == 1000
    assert span.interval_s == pytest.approx(s2.monotonic_s - s0.monotonic_s)


@pytest.mark.parametrize(
    "seconds,text", [(10.0, "10 s"), (0.25, "250 ms"), (750.0, "12.5 min"), (11520.0, "3.2 h")]
)
def test_duration_text(seconds, text):
    from ibdiag.units import format_duration as duration_text

    assert duration_text(seconds) == text
