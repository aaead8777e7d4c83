"""Pure parsers of sysfs value formats, tested with literal strings."""

import pytest

from ibdiag import parse


@pytest.mark.parametrize(
    "text, expected",
    [
        ("400 Gb/sec (4X NDR)", (400.0, 4, "NDR")),
        ("2.5 Gb/sec (1X SDR)", (2.5, 1, "SDR")),
        ("10 Gb/sec (4X)", (10.0, 4, None)),  # old kernels print SDR as a bare width
        ("56 Gb/sec (4X FDR)", (56.0, 4, "FDR")),
        ("40 Gb/sec (4X FDR10)", (40.0, 4, "FDR10")),
        ("800 Gb/sec (4X XDR)\n", (800.0, 4, "XDR")),
        ("100 Gb/sec", (100.0, None, None)),
    ],
)
def test_ib_rate(text, expected):
    r = parse.parse_ib_rate(text)
    assert (r.rate_gbps, r.width, r.speed) == expected


@pytest.mark.parametrize(
    "text", ["", "fast", "400 Gbit/s", "Gb/sec (4X NDR)", "400 Gb/sec (4X NDR"]
)
def test_ib_rate_rejects(text):
    with pytest.raises(ValueError):
        parse.parse_ib_rate(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4: ACTIVE", (4, "ACTIVE")),
        ("1: DOWN", (1, "DOWN")),
        ("5: LinkUp", (5, "LinkUp")),
        ("7: Phy Test", (7, "Phy Test")),
        (" 2: Polling\n", (2, "Polling")),
    ],
)
def test_enum_state(text, expected):
    assert parse.parse_enum_state(text) == expected


@pytest.mark.parametrize("text", ["ACTIVE", "4", "x: ACTIVE", ""])
def test_enum_state_rejects(text):
    with pytest.raises(ValueError):
        parse.parse_enum_state(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("32.0 GT/s PCIe", 32.0),
        ("8 GT/s", 8.0),
        ("2.5 GT/s PCIe", 2.5),
        ("64.0 GT/s PCIe", 64.0),
        ("Unknown", None),
        ("Unknown speed", None),
    ],
)
def test_pci_speed(text, expected):
    assert parse.parse_pci_speed(text) == expected


def test_pci_speed_rejects_garbage():
    with pytest.raises(ValueError):
        parse.parse_pci_speed("fast")


def test_pci_width():
    assert parse.parse_pci_width("16") == 16
    assert parse.parse_pci_width("x8") == 8
    with pytest.raises(ValueError):
        parse.parse_pci_width("sixteen")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0-3", (0, 1, 2, 3)),
        ("0-1,4", (0, 1, 4)),
        ("", ()),
        ("7", (7,)),
        ("0-7:2/4", (0, 1, 4, 5)),
    ],
)
def test_cpulist(text, expected):
    assert tuple(parse.parse_cpulist(text)) == expected


def test_cpulist_roundtrip_and_errors():
    cpus = parse.parse_cpulist("0-55,112-167")
    assert len(cpus) == 112
    assert parse.format_cpulist(cpus) == "0-55,112-167"
    with pytest.raises(ValueError):
        parse.parse_cpulist("3-1")
    with pytest.raises(ValueError):
        parse.parse_cpulist("0-3,a")


def test_numbers():
    assert parse.parse_hex("0x10de") == 0x10DE
    assert parse.parse_hex("15b3") == 0x15B3
    assert parse.parse_lid("0x3a4") == 932
    assert parse.parse_numa_node("-1") is None
    assert parse.parse_numa_node("1") == 1
    for bad in ("", "0x", "12a"):
        with pytest.raises(ValueError):
            parse.parse_int(bad)
    with pytest.raises(ValueError):
        parse.parse_numa_node("-2")


def test_pci_addresses():
    assert parse.is_pci_address("0000:17:00.0")
    assert parse.is_pci_address("10000:e1:00.0")  # VMD domains are wider
    assert not parse.is_pci_address("pci0000:17")
    addrs = ["0000:9a:00.0", "0000:18:00.0", "0001:00:00.0", "0000:18:00.1"]
    assert sorted(addrs, key=parse.pci_sort_key) == [
        "0000:18:00.0",
        "0000:18:00.1",
        "0000:9a:00.0",
        "0001:00:00.0",
    ]
    assert parse.pcie_gen(32.0) == 5 and parse.pcie_gen(2.5) == 1 and parse.pcie_gen(None) is None
