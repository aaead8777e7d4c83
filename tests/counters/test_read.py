"""Reading counters through the real path (SysfsRoot over sysfs-shaped trees): fixtures and edge cases.

The trees are built with ``tests.support.counters`` (``node()`` and ``write()``), as in the other
counters tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ibdiag.counters.read import (
    data_counter_bits,
    discover_layout,
    parse_counter,
    parse_device_filter,
    read_sample,
)
from ibdiag.counters.spec import IB_COUNTERS
from ibdiag.errors import UsageError
from ibdiag.node.sysfs import SysfsRoot
from tests.support.counters import node
from tests.support.env import SYSFS_FIXTURES


def sample_of(root: Path, **kw):
    sysfs = SysfsRoot(root)
    return read_sample(sysfs, discover_layout(sysfs), **kw)


# --- pure parsers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value", [("0", 0), ("1234\n", 1234), ("18446744073709551615", 2**64 - 1), (" 42 ", 42)]
)
def test_parse_counter(text, value):
    assert parse_counter(text) == value


@pytest.mark.parametrize("text", ["N/A (no PMA)", "-1", "0x10", "12 34", "", "1.5"])
def test_parse_counter_rejects(text):
    with pytest.raises(ValueError):
        parse_counter(text)


def test_data_counter_width_detection():
    assert (
        data_counter_bits({"port_xmit_data": 5, "unicast_xmit_packets": 1}) == 64
    )  # extended-only file present
    assert (
        data_counter_bits({"port_xmit_data": 2**32, "port_rcv_data": 1}) == 64
    )  # a value beyond 32 bits
    assert data_counter_bits({"port_xmit_data": 2**32 - 1}) == 32  # no evidence: 32-bit
    assert data_counter_bits({"port_xmit_data": 2**40}, forced=32) == 32


def test_width_table_matches_the_kernel():
    # drivers/infiniband/core/sysfs.c PORT_PMA_ATTR widths.
    widths = {n: c.bits for n, c in IB_COUNTERS.items()}
    assert widths["symbol_error"] == widths["port_xmit_discards"] == widths["VL15_dropped"] == 16
    assert (
        widths["link_downed"]
        == widths["link_error_recovery"]
        == widths["port_rcv_constraint_errors"]
        == 8
    )
    assert widths["local_link_integrity_errors"] == widths["excessive_buffer_overrun_errors"] == 4
    assert widths["port_xmit_wait"] == 32
    assert widths["port_xmit_data"] is None and widths["unicast_rcv_packets"] == 64


@pytest.mark.parametrize("spec", ["mlx5_0::1", "mlx5_0:", ",", "mlx5_0:x"])
def test_device_filter_rejects_bad_items(spec):
    with pytest.raises(UsageError):
        parse_device_filter([spec])


def test_device_filter_splits_commas():
    assert parse_device_filter(["mlx5_0:1,mlx5_3", "mlx5_*"]) == ["mlx5_0:1", "mlx5_3", "mlx5_*"]


# --- the fixture -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faulty():
    return sample_of(SYSFS_FIXTURES / "counters-faulty")


def port(sample, subject):
    return next(p for p in sample.ports if p.subject == subject)


def test_fixture_healthy_port_values_and_bytes(faulty):
    p = port(faulty, "mlx5_0:1")
    assert p.counters["port_xmit_data"] == 93415662203  # as sysfs prints it: 4-octet words
    assert p.xmit_bytes == 93415662203 * 4 and p.rcv_bytes == 92886016427 * 4
    assert p.values()["xmit_bytes"] == p.xmit_bytes
    assert p.data_bits == 64 and not p.saturated and not p.unavailable
    assert p.info.state == "ACTIVE" and p.info.rate_gbps == 400.0
    assert (
        "lifespan" not in p.hw_counters and p.hw_lifespan_ms == 12
    )  # a cache interval, not a counter


def test_fixture_saturated_counters(faulty):
    p = port(faulty, "mlx5_1:1")
    assert p.saturated == {
        "port_xmit_wait",
        "link_downed",
        "port_xmit_discards",
        "excessive_buffer_overrun_errors",
    }
    assert "symbol_error" not in p.saturated  # 4811 of 65535


def test_fixture_missing_counters_dir_and_no_pma(faulty):
    p3 = port(faulty, "mlx5_3:1")
    assert p3.counters is None and p3.hw_counters is not None and p3.xmit_bytes is None
    p5 = port(faulty, "mlx5_5:1")
    assert set(p5.counters.values()) == {None}
    assert set(p5.unavailable.values()) == {"N/A (no PMA)"} and len(p5.unavailable) == 17
    assert p5.hw_counters is None


def test_fixture_down_port_and_roce_hw_counters(faulty):
    assert port(faulty, "mlx5_2:1").info.state == "DOWN"
    p4 = port(faulty, "mlx5_4:1")
    assert p4.info.link_layer == "Ethernet" and p4.hw_counters["out_of_sequence"] == 5821


def test_reading_keeps_sysfs_problems_empty(faulty):
    sysfs = SysfsRoot(SYSFS_FIXTURES / "counters-faulty")
    layout = discover_layout(sysfs)
    for _ in range(3):
        read_sample(sysfs, layout)
    assert sysfs.problems == []  # a long --watch must not grow this list


# --- edge cases in tmp_path ---------------------------------------------------------------------------


def test_32bit_data_counters_saturate_at_all_ones(tmp_path):
    node(
        tmp_path,
        {"counters": {"port_xmit_data": 2**32 - 1, "port_rcv_data": 12}, "extended": False},
    )
    p = sample_of(tmp_path).ports[0]
    assert p.data_bits == 32 and p.saturated == {"port_xmit_data"}
    assert p.saturated_keys() == {"port_xmit_data", "xmit_bytes"}


def test_64bit_counters_do_not_saturate_at_32bit_all_ones(tmp_path):
    node(tmp_path, {"counters": {"port_xmit_data": 2**32 - 1}})  # extended-only files present
    p = sample_of(tmp_path).ports[0]
    assert p.data_bits == 64 and not p.saturated


def test_config_can_force_counter_width(tmp_path):
    node(tmp_path, {"counters": {"port_xmit_data": 2**32 - 1}})
    assert sample_of(tmp_path, data_bits=32).ports[0].saturated == {"port_xmit_data"}


def test_unreadable_empty_and_malformed_files_are_tolerated(tmp_path):
    node(tmp_path, {"counters": {"symbol_error": "garbage"}})
    counters = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters"
    (counters / "link_downed").write_text("")
    # A file the kernel cannot read fails with EIO/EINVAL; a directory in its place is the closest
    # stand-in a test can build without a driver (open() fails with an OSError there too).
    (counters / "VL15_dropped").unlink()
    (counters / "VL15_dropped").mkdir()
    (counters / "VL15_dropped" / "x").write_text("0\n")
    p = sample_of(tmp_path).ports[0]
    assert p.counters["symbol_error"] is None and p.unavailable["symbol_error"].startswith(
        "malformed"
    )
    assert p.unavailable["link_downed"] == "empty file"
    assert p.unavailable["VL15_dropped"].startswith("unreadable")
    assert p.counters["port_rcv_errors"] == 0  # the rest still read


def test_file_gone_between_layout_and_read(tmp_path):
    node(tmp_path, {})
    sysfs = SysfsRoot(tmp_path)
    layout = discover_layout(sysfs)
    os.unlink(tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error")
    p = read_sample(sysfs, layout).ports[0]
    assert p.unavailable == {"symbol_error": "missing"}


def test_device_level_hw_counters(tmp_path):
    node(tmp_path, {}, device_hw={"lifespan": 10, "rx_vport_rdma_unicast_packets": 12345})
    sample = sample_of(tmp_path)
    dev = [p for p in sample.ports if p.port is None]
    assert len(dev) == 1 and dev[0].adapter == "mlx5_0" and dev[0].subject == "mlx5_0"
    assert (
        dev[0].hw_counters == {"rx_vport_rdma_unicast_packets": 12345}
        and dev[0].hw_lifespan_ms == 10
    )
    assert dev[0].info is None and dev[0].counters is None


def test_hw_counter_name_clash_is_qualified(tmp_path):
    node(tmp_path, {"hw": {"symbol_error": 7}})
    p = sample_of(tmp_path).ports[0]
    values = p.values()
    assert values["symbol_error"] == 0 and values["hw_counters/symbol_error"] == 7
    assert p.sources()["hw_counters/symbol_error"] == "hw_counters"


def test_device_filter_selects_ports_and_names_what_exists(tmp_path):
    node(tmp_path, {}, {}, {})
    sysfs = SysfsRoot(tmp_path)
    assert [p.subject for p in discover_layout(sysfs, ["mlx5_1"])] == ["mlx5_1:1"]
    assert [p.subject for p in discover_layout(sysfs, ["mlx5_[02]:1"])] == ["mlx5_0:1", "mlx5_2:1"]
    with pytest.raises(UsageError) as e:
        discover_layout(sysfs, ["mlx5_9:1"])
    assert "mlx5_0:1" in e.value.hint


def test_natural_order_of_adapters(tmp_path):
    node(tmp_path, *([{}] * 11))
    assert [p.adapter for p in sample_of(tmp_path).ports][:3] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert [p.adapter for p in sample_of(tmp_path).ports][-1] == "mlx5_10"
