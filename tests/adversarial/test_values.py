"""Numbers the kernel cannot print: each becomes a finding (topo.sysfs_value, counters.unavailable) or a
clean ValueError in the parser, never a value that is used, never an internal error or a MemoryError."""

from __future__ import annotations

import json
import os

import pytest

from ibdiag import parse
from ibdiag.counters.read import parse_counter
from tests.adversarial.test_root_trees import PORT, small_node


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "node"
    small_node(root)
    return root


def findings(res) -> list[dict]:
    return json.loads(res.stdout)["findings"]


# --- the parsers -------------------------------------------------------------------------------------


def test_cpulist_keeps_ranges_and_bounds_cpu_ids():
    cpus = parse.parse_cpulist("0-8191")
    assert cpus.ranges == ((0, 8191),) and len(cpus) == 8192 and 8191 in cpus and 8192 not in cpus
    assert str(parse.parse_cpulist("0-3,4-7,16")) == "0-7,16"
    assert parse.format_cpulist(parse.parse_cpulist("0-55,112-167")) == "0-55,112-167"
    assert parse.format_cpulist((3, 1, 2, 8)) == "1-3,8"
    assert parse.parse_cpulist("0-15:2/4").ranges == ((0, 1), (4, 5), (8, 9), (12, 13))
    assert parse.parse_cpulist("0-9:3/4").ranges == ((0, 2), (4, 6), (8, 9))


@pytest.mark.parametrize(
    "text, words",
    [
        ("0-99999999999", "not a CPU list"),
        ("0-8192", "below 8192"),
        ("0-15:2/0", "bad CPU group"),
        ("0-15:5/4", "bad CPU group"),
        ("0-٣", "not a CPU list"),
        ("0-3,,4", "not a CPU list"),
        ("3-1", "descending"),
        ("5:1/2", "not a CPU list"),
    ],
)
def test_malformed_cpulists_are_clean_errors(text, words):
    with pytest.raises(ValueError, match=words):
        parse.parse_cpulist(text)


@pytest.mark.parametrize(
    "parser, text",
    [
        (parse.parse_int, "٣"),
        (parse.parse_int, "²"),
        (parse.parse_int, "9" * 21),
        (parse.parse_int, "9" * 5000),
        (parse.parse_hex, "f" * 17),
        (parse.parse_pci_id, "0x10000"),
        (parse.parse_pci_class, "0x1000000"),
        (parse.parse_lid, "0x10000"),
        (parse.parse_numa_node, "1024"),
        (parse.parse_numa_node, "-2"),
        (parse.parse_ib_rate, "9" * 400 + " Gb/sec (4X NDR)"),
        (parse.parse_ib_rate, "4800 Gb/sec (12X XDR)"),
        (parse.parse_ib_rate, "400 Gb/sec (1X SDR)"),
        (parse.parse_ib_rate, "400 Gb/sec (3X NDR)"),
        (parse.parse_ib_rate, "0 Gb/sec"),
        (parse.parse_ib_rate, "٤00 Gb/sec (4X NDR)"),
        (parse.parse_enum_state, "999: ACTIVE"),
        (parse.parse_enum_state, "٤: ACTIVE"),
        (parse.parse_pci_speed, "9999 GT/s PCIe"),
        (parse.parse_pci_width, "17"),
        (parse.parse_pci_width, "x99"),
        (parse.parse_entry_number, "²"),
        (parse.parse_entry_number, "01"),
        (parse.parse_entry_number, "1a"),
        (parse.parse_entry_number, "99999999999"),
        (parse_counter, "٣"),
        (parse_counter, "9" * 5000),
    ],
)
def test_numbers_the_kernel_cannot_print_are_refused(parser, text):
    with pytest.raises(ValueError) as e:
        parser(text)
    assert len(str(e.value)) < 200 and str(e.value).isprintable()


def test_counter_widths_bound_the_values():
    assert parse_counter("65535", 16) == 65535
    with pytest.raises(ValueError, match="does not fit a 16-bit counter"):
        parse_counter("70000", 16)
    with pytest.raises(ValueError, match="64-bit"):
        parse_counter(str(2**64))


def test_values_the_kernel_does_print_still_parse():
    assert parse.parse_ib_rate("2400 Gb/sec (12X XDR)").rate_gbps == 2400
    assert parse.parse_ib_rate("600 Gb/sec (12X HDR)").width == 12
    assert parse.parse_pci_width("255") is None  # PCIE_LNK_WIDTH_UNKNOWN
    assert parse.parse_pci_width("0") == 0 and parse.parse_pci_width("x16") == 16
    assert parse.parse_numa_node("1023") == 1023
    assert parse.parse_entry_number("0") == 0 and parse.parse_entry_number("1") == 1


# --- through the commands ------------------------------------------------------------------------------


def test_a_400_digit_rate_is_a_finding_not_infinity(cli, node):
    (node / PORT / "rate").write_text("9" * 400 + " Gb/sec (4X NDR)\n")
    res = cli("topo", "--root", node, "-o", "json")
    assert res.exit_code == 0 and "expected inf" not in res.stdout
    doc = json.loads(res.stdout)
    assert doc["adapters"][0]["ports"][0]["rate_gbps"] is None
    (f,) = [f for f in doc["findings"] if f["check"] == "port.rate"]
    assert f["severity"] == "warn" and "could not be read" in f["message"]
    interval = cli("counters", "--root", node, "--interval", "0.1", "-o", "json")
    assert interval.exit_code in (0, 1), interval.stderr
    assert "internal error" not in interval.stderr


def test_a_5000_digit_counter_is_unavailable_and_not_echoed(cli, node):
    (node / PORT / "counters/symbol_error").write_text("9" * 5000 + "\n")
    res = cli("counters", "--root", node, "-o", "json")
    (u,) = [f for f in findings(res) if f["check"] == "counters.unavailable"]
    assert "symbol_error" in u["message"] and "9" * 80 not in u["message"]


def test_a_16_bit_counter_at_70000_is_unavailable_not_an_error_count(cli, node):
    (node / PORT / "counters/symbol_error").write_text("70000\n")
    res = cli("counters", "--root", node, "-o", "json")
    doc = json.loads(res.stdout)
    (u,) = [f for f in doc["findings"] if f["check"] == "counters.unavailable"]
    assert "symbol_error" in u["message"] and "16-bit" in u["message"]
    assert not [
        f for f in doc["findings"] if f["check"] == "counters.errors" and f["severity"] != "ok"
    ]


def test_non_ascii_digits_are_malformed(cli, node):
    (node / PORT / "counters/link_downed").write_text("٣\n")
    (
        node
        / "sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0/numa_node"
    ).write_text("٠\n")
    res = cli("counters", "--root", node, "-o", "json")
    (u,) = [f for f in findings(res) if f["check"] == "counters.unavailable"]
    assert "link_downed" in u["message"]
    topo = json.loads(cli("topo", "--root", node, "-o", "json").stdout)
    assert topo["gpus"][0]["numa_node"] is None
    assert any(
        f["subject"].endswith("0000:13:00.0/numa_node")
        for f in topo["findings"]
        if f["check"] == "topo.sysfs_value"
    )


def test_numa_node_99_on_a_one_node_machine_is_a_finding(cli, node):
    gpu = node / "sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0"
    (gpu / "numa_node").write_text("99\n")
    doc = json.loads(cli("topo", "--root", node, "-o", "json").stdout)
    assert doc["gpus"][0]["numa_node"] is None
    (f,) = [f for f in doc["findings"] if f["check"] == "topo.sysfs_value"]
    assert (
        f["subject"].endswith("/numa_node")
        and "NUMA node 99" in f["message"]
        and "has NUMA nodes 0" in f["message"]
    )


def test_a_port_directory_named_superscript_two_is_skipped_with_a_finding(cli, node):
    ports = node / "sys/class/infiniband/mlx5_0/ports"
    os.mkdir(ports / "²")
    (ports / "²" / "state").write_text("4: ACTIVE\n")
    os.mkdir(ports / "01")
    topo = cli("topo", "--root", node, "-o", "json")
    assert topo.exit_code == 0 or "internal error" not in topo.stderr
    doc = json.loads(topo.stdout)
    assert [p["port"] for p in doc["adapters"][0]["ports"]] == [1]
    subjects = {f["subject"] for f in doc["findings"] if f["check"] == "topo.sysfs_value"}
    assert {s.rsplit("/", 1)[-1] for s in subjects} == {"²", "01"}
    counters = cli("counters", "--root", node, "-o", "json")
    assert counters.exit_code in (0, 1) and "internal error" not in counters.stderr


def test_a_gid_index_named_superscript_two_is_skipped(cli, node):
    gids = node / PORT / "gids"
    (gids / "²").write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
    res = cli("topo", "--root", node, "-o", "json")
    assert res.exit_code in (0, 1) and "internal error" not in res.stderr


def test_an_adapter_name_with_escapes_never_reaches_the_output(cli, node):
    cls = node / "sys/class/infiniband"
    os.rename(cls / "mlx5_0", cls / "mlx5_\x1b[2J")
    for cmd in (["topo"], ["counters"]):
        res = cli(*cmd, "--root", node)
        assert "\x1b" not in res.stdout + res.stderr and "internal error" not in res.stderr


def test_a_cpulist_bomb_is_a_finding_not_a_memory_error(cli, node):
    (node / "sys/devices/system/node/node0/cpulist").write_text("0-99999999999\n")
    gpu = node / "sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0"
    (gpu / "local_cpulist").write_text("0-15:2/0\n")
    res = cli("topo", "--root", node, "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    subjects = {f["subject"] for f in findings(res) if f["check"] == "topo.sysfs_value"}
    assert any(s.endswith("node0/cpulist") for s in subjects) and any(
        s.endswith("local_cpulist") for s in subjects
    )


def test_cpu_affinity_output_is_unchanged_for_real_lists(cli, fixture_root):
    doc = json.loads(cli("topo", "--root", fixture_root("dgx-h100"), "-o", "json").stdout)
    assert {g["cpu_affinity"] for g in doc["gpus"]} == {"0-55,112-167", "56-111,168-223"}
    assert [n["cpus"] for n in doc["numa_nodes"]] == ["0-55,112-167", "56-111,168-223"]
