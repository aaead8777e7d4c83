"""SysfsRoot: every read goes through it; broken values become None and a recorded problem."""

import os
from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.parse import parse_ib_rate


def make(tmp_path: Path, files: dict[str, str]) -> SysfsRoot:
    for rel, text in files.items():
        p = tmp_path / "sys" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return SysfsRoot(tmp_path)


def test_read_strips_newline_and_handles_missing_and_empty(tmp_path):
    s = make(tmp_path, {"a/value": "4: ACTIVE\n", "a/empty": "", "a/blank": "\n"})
    assert s.read("a/value") == "4: ACTIVE"
    assert s.read("/sys/a/value") == "4: ACTIVE"
    assert s.read("a/missing") is None
    assert s.problems == []  # missing is normal, not a problem
    assert s.read("a/empty") is None and s.read("a/blank") is None
    assert [p.kind for p in s.problems] == ["empty", "empty"]


def test_malformed_value_is_none_and_recorded(tmp_path):
    s = make(tmp_path, {"class/infiniband/mlx5_0/ports/1/rate": "lots of gigabits\n"})
    assert s.read_as("class/infiniband/mlx5_0/ports/1/rate", parse_ib_rate) is None
    (problem,) = s.problems
    assert problem.kind == "malformed" and problem.path == "class/infiniband/mlx5_0/ports/1/rate"


def test_directory_where_a_file_should_be(tmp_path):
    (tmp_path / "sys" / "x" / "rate").mkdir(parents=True)
    s = SysfsRoot(tmp_path)
    assert s.read("x/rate") is None
    assert s.problems[0].kind == "unreadable"


@pytest.mark.skipif(not os.path.exists("/sys/class/net/lo/speed"), reason="needs a Linux /sys")
def test_real_einval_read_on_this_machine():
    # /sys/class/net/lo/speed exists but reading it fails with EINVAL on every Linux box.
    s = SysfsRoot("/")
    assert s.exists("class/net/lo/speed")
    assert s.read("class/net/lo/speed") is None
    (problem,) = s.problems
    assert problem.kind == "unreadable" and "Invalid argument" in problem.detail


def test_resolve_follows_relative_links_and_refuses_escapes(tmp_path):
    s = make(tmp_path, {"devices/pci0000:00/0000:00:01.0/vendor": "0x15b3\n"})
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink(
        "../../../devices/pci0000:00/0000:00:01.0", tmp_path / "sys/bus/pci/devices/0000:00:01.0"
    )
    os.symlink(
        "/etc", tmp_path / "sys/bus/pci/devices/0000:00:02.0"
    )  # absolute: would read the host
    os.symlink("../../../devices/nowhere", tmp_path / "sys/bus/pci/devices/0000:00:03.0")
    assert s.resolve("bus/pci/devices/0000:00:01.0") == "devices/pci0000:00/0000:00:01.0"
    assert s.read("bus/pci/devices/0000:00:01.0/vendor") == "0x15b3"
    assert s.resolve("bus/pci/devices/0000:00:02.0") is None
    assert any("outside" in p.detail for p in s.problems)
    assert s.resolve("bus/pci/devices/0000:00:03.0") is None  # dangling
    assert s.listdir("bus/pci/devices") == ["0000:00:01.0", "0000:00:02.0", "0000:00:03.0"]
    assert s.listdir("nope") == []


def test_check_refuses_a_root_without_sys(tmp_path):
    with pytest.raises(InputError) as e:
        SysfsRoot(tmp_path).check()
    assert "no sys/" in e.value.message and "snapshot" in e.value.hint


def test_realpath_answers_what_os_path_realpath_does(tmp_path):
    """sysfs.realpath asks the kernel (O_PATH + /proc/self/fd); it must agree with os.path.realpath
    for every kind of path a tree under --root can hold, and never open a FIFO for reading."""
    from ibdiag.node.sysfs import realpath

    d = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:01.0"
    d.mkdir(parents=True)
    (d / "vendor").write_text("0x15b3\n")
    links = tmp_path / "sys" / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", links / "rel")
    os.symlink("rel", links / "chain")  # a link to a link
    os.symlink("/etc", links / "absolute")
    os.symlink("../../../devices/nowhere", links / "dangling")
    os.symlink("loop", links / "loop")
    os.mkfifo(links / "fifo")
    paths = [
        links / "rel",
        links / "chain" / "vendor",
        links
        / "chain"
        / ".."
        / "0000:00:01.0"
        / "vendor",  # '..' after a link: taken from the link's target
        links / "absolute",
        links / "dangling",
        links / "dangling" / "vendor",
        links / "loop",
        links / "fifo",
        links / "missing",
        tmp_path / "sys",
    ]
    for p in paths:
        assert realpath(p) == os.path.realpath(p), p
        assert realpath(str(p)) == os.path.realpath(p), p


def test_a_value_at_the_size_cap_is_read_and_one_byte_more_is_not(tmp_path):
    from ibdiag.node.sysfs import MAX_VALUE_BYTES

    s = make(
        tmp_path,
        {"a/full": "7" * MAX_VALUE_BYTES, "a/over": "7" * (MAX_VALUE_BYTES + 1), "a/short": "1\n"},
    )
    assert s.read("a/full") == "7" * MAX_VALUE_BYTES
    assert s.read("a/short") == "1"
    assert s.read("a/over") is None
    (problem,) = s.problems
    assert problem.kind == "malformed" and problem.path == "a/over"
