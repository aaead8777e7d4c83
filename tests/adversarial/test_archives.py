"""Snapshot archives built to hurt the node: nothing lands outside the extraction directory, nothing
is written for a refused archive, and the caps stop bombs early. Every archive is built here.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.node import archive
from ibdiag.node.snapshot import extracted
from tests.support.env import REPO, SYSFS_FIXTURES


def _add(
    tar: tarfile.TarFile, name: str, kind: str = "file", payload: str | bytes = "", **extra
) -> None:
    info = tarfile.TarInfo(name)
    for k, v in extra.items():
        setattr(info, k, v)
    if kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o777
        tar.addfile(info)
    elif kind == "link":
        info.type, info.linkname = tarfile.SYMTYPE, str(payload)
        tar.addfile(info)
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, str(payload)
        tar.addfile(info)
    elif kind in ("chr", "blk", "fifo"):
        info.type = {"chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
        info.devmajor, info.devminor = 1, 3
        tar.addfile(info)
    else:
        data = payload.encode() if isinstance(payload, str) else payload
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def build(path: Path, entries: list[tuple], *, fmt=tarfile.PAX_FORMAT, mode="w:gz") -> Path:
    with tarfile.open(path, mode, format=fmt) as tar:
        for entry in entries:
            _add(tar, *entry)
    return path


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch):
    """TMPDIR for the extraction, so a test can see everything that was (or was not) written there."""
    t = tmp_path / "tmpdir"
    t.mkdir()
    monkeypatch.setenv("TMPDIR", str(t))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return t


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def cve_2025_4517_archive(path: Path, tmpdir: Path, *, plant: bool = True) -> Path:
    """The PATH_MAX symlink bypass of tarfile's 'data' filter: directories with long names and short
    links to them, so the path a last link leads to is longer than PATH_MAX and realpath() gives up
    expanding it; links after that one escape the destination, and a file is written through them.
    The component length is chosen for ibdiag's extraction directory ``TMPDIR/ibdiag-root-XXXXXXXX``."""
    steps = "abcdefghijklmnop"
    dest_len = len(str(tmpdir / "ibdiag-root-XXXXXXXX")) + len("/sys/")
    component = "d" * ((os.pathconf(tmpdir, "PC_PATH_MAX") - dest_len) // (len(steps) + 1))
    entries: list[tuple] = []
    deep = ""
    for step in steps:
        entries.append((f"sys/{os.path.join(deep, component)}", "dir"))
        entries.append((f"sys/{os.path.join(deep, step)}", "link", component))
        deep = os.path.join(deep, component)
    last = os.path.join(*steps, "l" * 254)
    entries.append((f"sys/{last}", "link", os.path.join(*[".."] * len(steps))))
    # sys/escape -> (sys/ expanded) /../../..: two levels above the extraction directory.
    entries.append(("sys/escape", "link", os.path.join(last, "..", "..", "..")))
    if plant:
        entries.append(("sys/escape/planted", "file", "written outside"))
    return build(path, entries)


def test_cve_2025_4517_archive_is_refused_and_writes_nothing_outside(cli, tmp_path, private_tmpdir):
    arc = cve_2025_4517_archive(tmp_path / "cve.tar.gz", private_tmpdir)
    before = tree(tmp_path)
    res = cli("topo", "--root", arc)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert (
        "cannot read snapshot" in res.stderr
        and "hint:" in res.stderr
        and "Traceback" not in res.stderr
    )
    assert tree(tmp_path) == before  # no 'planted' file anywhere, the extraction directory is gone
    assert not (tmp_path / "planted").exists()


def test_cve_shaped_archive_within_the_length_caps_is_refused_by_link_resolution(
    tmp_path, private_tmpdir, monkeypatch
):
    # Raise the caps so the long names pass: the links must still be refused, by the archive's own
    # members (the last link sits below the link chain), never by asking the file system.
    monkeypatch.setattr(archive, "MAX_PATH_CHARS", 1 << 16)
    monkeypatch.setattr(archive, "MAX_DEPTH", 1 << 10)
    arc = cve_2025_4517_archive(tmp_path / "cve.tar.gz", private_tmpdir, plant=False)
    before = tree(tmp_path)
    with pytest.raises(InputError) as e:
        with extracted(arc):
            pass
    assert "entry 'sys/a' is a link and also has entries below it" in e.value.message
    assert tree(tmp_path) == before


LINK_TREE = [("sys/devices/pci0000:00/0000:00:01.0/vendor", "file", "0x15b3\n")]


@pytest.mark.parametrize(
    "entries, words",
    [
        # links that leave sys/, directly, through a chain, or through a link to a link
        (
            LINK_TREE + [("sys/class/infiniband/mlx5_0", "link", "../../../etc")],
            "leads outside sys/",
        ),
        (LINK_TREE + [("sys/a", "link", "b"), ("sys/b", "link", "../..")], "leads outside sys/"),
        (
            LINK_TREE
            + [
                ("sys/a", "link", "devices/../b"),
                ("sys/b", "link", "c/.."),
                ("sys/c", "link", ".."),
            ],
            "leads outside sys/",
        ),
        (LINK_TREE + [("sys/x", "link", "devices/pci0000:00/../../../tmp")], "leads outside sys/"),
        (
            LINK_TREE + [("sys/class/net/eth0", "link", "/sys/devices/virtual/net/eth0")],
            "is absolute",
        ),
        # a link may only point to a member, and never loop
        (
            LINK_TREE
            + [
                (
                    "sys/bus/pci/devices/0000:00:02.0",
                    "link",
                    "../../../devices/pci0000:00/0000:00:02.0",
                )
            ],
            "points to nothing",
        ),
        (LINK_TREE + [("sys/a", "link", "b"), ("sys/b", "link", "a")], "more than 40 links"),
        (
            LINK_TREE + [("sys/x", "link", "devices/pci0000:00/0000:00:01.0/vendor/more")],
            "points to nothing",
        ),
        # nothing is written through a link, even one that stays inside
        (
            LINK_TREE + [("sys/l", "link", "devices"), ("sys/l/evil", "file", "x")],
            "is a link and also has entries below it",
        ),
        (
            LINK_TREE + [("sys/f", "file", "x"), ("sys/f/g", "file", "y")],
            "is a file and also has entries below it",
        ),
        # names
        ([("sys/../../evil", "file", "x")], "not a plain relative path"),
        ([("/sys/class/x", "file", "x")], "not a plain relative path"),
        ([("sys/class//x", "file", "x")], "not a plain relative path"),
        ([("sys/./x", "file", "x")], "not a plain relative path"),
        ([("sys/class/x\x1b[2J", "file", "x")], "control or non-UTF-8 characters"),
        ([("sys/class/x\nline", "file", "x")], "control or non-UTF-8 characters"),
        ([("sys/" + "/".join(["d"] * 40), "file", "x")], "deeper than 32 levels"),
        ([("sys/" + "n" * 300, "file", "x")], "longer than 255 bytes"),
        ([("sys/a", "file", "x"), ("sys/a", "file", "y")], "appears twice"),
        # types a snapshot never holds
        ([("sys/hard", "hardlink", "sys/x"), ("sys/x", "file", "x")], "a hard link"),
        ([("sys/null", "chr")], "a character device"),
        ([("sys/disk", "blk")], "a block device"),
        ([("sys/pipe", "fifo")], "a FIFO"),
        (
            [("ibdiag-snapshot.json", "link", "sys/x"), ("sys/x", "file", "{}")],
            "not a regular file",
        ),
        ([("sys", "link", ".")], "is not inside sys/"),
        ([("sys/big", "file", "x" * (2**20 + 1))], "more than 1048576"),
    ],
)
def test_malicious_members_are_refused_before_anything_is_written(
    tmp_path, private_tmpdir, entries, words
):
    arc = build(tmp_path / "bad.tar.gz", entries)
    with pytest.raises(InputError) as e:
        with extracted(arc):
            pytest.fail("a refused archive was extracted")
    assert "cannot read snapshot" in e.value.message and words in e.value.message, e.value.message
    assert e.value.message.isprintable() and len(e.value.message) < 600
    assert tree(private_tmpdir) == []


def test_a_nul_in_a_pax_path_is_refused(tmp_path, private_tmpdir):
    path = tmp_path / "nul.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("sys/placeholder")
        info.pax_headers = {"path": "sys/a\x00/../../etc"}
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(InputError, match="control or non-UTF-8"):
        with extracted(path):
            pass


def test_foreign_entries_say_not_a_snapshot(tmp_path, private_tmpdir):
    with pytest.raises(InputError, match="not an ibdiag snapshot"):
        with extracted(build(tmp_path / "x.tar.gz", [("etc/passwd", "file", "root")])):
            pass


def test_links_inside_sys_resolve_through_chains_and_extract(tmp_path, private_tmpdir):
    entries = LINK_TREE + [
        ("sys/bus/pci/devices/0000:00:01.0", "link", "../../../devices/pci0000:00/0000:00:01.0"),
        (
            "sys/class/infiniband/mlx5_0",
            "link",
            "../../bus/pci/devices/0000:00:01.0",
        ),  # a link to a link
        ("sys/class/top", "link", ".."),  # sys/ itself is inside
        ("ibdiag-snapshot.json", "file", json.dumps({"host": "n1"})),
    ]
    with extracted(build(tmp_path / "ok.tar.gz", entries)) as root:
        assert (root / "sys/class/infiniband/mlx5_0/vendor").read_text() == "0x15b3\n"
        assert os.readlink(root / "sys/class/top") == ".."
        assert json.loads((root / "ibdiag-snapshot.json").read_text()) == {"host": "n1"}
        extraction = root
    assert not extraction.exists()


def test_entry_count_cap(tmp_path, private_tmpdir, monkeypatch):
    monkeypatch.setattr(archive, "MAX_ENTRIES", 50)
    arc = build(tmp_path / "many.tar.gz", [(f"sys/f{i}", "file", "") for i in range(51)])
    with pytest.raises(InputError, match="more than 50 entries"):
        with extracted(arc):
            pass
    assert tree(private_tmpdir) == []


def test_gzip_bomb_stops_at_the_uncompressed_cap(tmp_path, private_tmpdir, monkeypatch):
    # 200 MiB of zeros in 1 MiB files (each under the per-file cap), about 200 KB compressed.
    path = tmp_path / "bomb.tar.gz"
    zeros = bytes(2**20)
    with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        for i in range(200):
            info = tarfile.TarInfo(f"sys/z{i}")
            info.size = len(zeros)
            tar.addfile(info, io.BytesIO(zeros))
    assert path.stat().st_size < 4 * 2**20
    read: list[int] = []
    real_read = archive._CappedStream.read

    def counting_read(self, size=-1):
        data = real_read(self, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(archive._CappedStream, "read", counting_read)
    with pytest.raises(InputError, match="more than 128 MiB once decompressed"):
        with extracted(path):
            pass
    assert tree(private_tmpdir) == []
    assert sum(read) <= archive.MAX_UNCOMPRESSED_BYTES


def test_a_member_claiming_gigabytes_is_refused_from_its_header(tmp_path, private_tmpdir):
    # The header says 3.9 GB; the data is not even there: refused before any of it is read.
    info = tarfile.TarInfo("sys/huge")
    info.size = 3_900_000_000
    path = tmp_path / "huge.tar.gz"
    path.write_bytes(gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT) + bytes(1024)))
    with pytest.raises(InputError, match="3900000000 bytes"):
        with extracted(path):
            pass


@pytest.mark.parametrize("mode", ["w:", "w:bz2", "w:xz"])
def test_other_compressions_and_plain_tar_are_read_the_same_way(tmp_path, private_tmpdir, mode):
    arc = build(tmp_path / "s.tar", LINK_TREE + [("sys/l", "link", "devices")], mode=mode)
    with extracted(arc) as root:
        assert (root / "sys/l/pci0000:00/0000:00:01.0/vendor").read_text() == "0x15b3\n"
    bad = build(tmp_path / "b.tar", [("sys/pipe", "fifo")], mode=mode)
    with pytest.raises(InputError, match="a FIFO"):
        with extracted(bad):
            pass


def test_extraction_does_not_use_tarfile_filters(cli, tmp_path, monkeypatch):
    """Python 3.11.0-3.11.3 have no extraction filters (no ``filter=``, no ``data_filter``)."""
    out = tmp_path / "s.tar.gz"
    assert cli("snapshot", out, "--root", SYSFS_FIXTURES / "roce-node").exit_code == 0
    for name in ("data_filter", "tar_filter", "fully_trusted_filter"):
        monkeypatch.delattr(tarfile, name, raising=False)

    def no_filters(*args, **kwargs):
        raise AssertionError("tarfile's own extraction was used")

    monkeypatch.setattr(tarfile.TarFile, "extractall", no_filters)
    monkeypatch.setattr(tarfile.TarFile, "extract", no_filters)
    res = cli("topo", "--root", out, "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    assert json.loads(res.stdout)["adapters"]


DEBIAN_PYTHON = Path("/usr/bin/python3")


def test_snapshots_open_on_the_systems_own_python(cli, tmp_path):
    """Debian 12's /usr/bin/python3 is 3.11.2: no ``extractall(filter=...)``. Open a real snapshot and
    refuse an escaping one with it, through the same module."""
    if not DEBIAN_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 here")
    version = subprocess.run(
        [DEBIAN_PYTHON, "-c", "import sys; print(sys.version_info[:3])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out = tmp_path / "s.tar.gz"
    assert cli("snapshot", out, "--root", SYSFS_FIXTURES / "roce-node").exit_code == 0
    bad = build(
        tmp_path / "bad.tar.gz", LINK_TREE + [("sys/a", "link", "b"), ("sys/b", "link", "../..")]
    )
    script = (
        "import sys\n"
        "from ibdiag.node.snapshot import extracted\n"
        "from ibdiag.errors import InputError\n"
        "with extracted(sys.argv[1]) as root:\n"
        "    print(sorted(p.name for p in (root / 'sys/class/infiniband').iterdir()))\n"
        "    print((root / 'sys/class/infiniband/mlx5_0/ports/1/rate').read_text().strip())\n"
        "try:\n"
        "    with extracted(sys.argv[2]):\n"
        "        print('extracted')\n"
        "except InputError as e:\n"
        "    print('refused:', e.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [DEBIAN_PYTHON, "-c", script, out, bad], capture_output=True, text=True, env=env, timeout=60
    )
    assert res.returncode == 0, (version, res.stderr)
    lines = res.stdout.splitlines()
    assert lines[0].startswith("['mlx5_0'") and "Gb/sec" in lines[1], (version, res.stdout)
    assert lines[2].startswith("refused:") and "leads outside sys/" in lines[2], (
        version,
        res.stdout,
    )


def test_the_caps_are_in_the_security_doc():
    doc = (REPO / "docs" / "security.md").read_text()
    for cap in (
        f"{archive.MAX_ENTRIES:,}",
        f"{archive.MAX_UNCOMPRESSED_BYTES // 2**20} MiB",
        f"{archive.MAX_FILE_BYTES // 2**20} MiB",
        f"{archive.MAX_DEPTH} levels",
    ):
        assert cap in doc, cap


def test_a_snapshot_is_written_within_the_caps_it_is_read_with(cli, tmp_path):
    out = tmp_path / "big.tar.gz"
    assert cli("snapshot", out, "--root", SYSFS_FIXTURES / "dgx-h100").exit_code == 0
    with tarfile.open(out) as tar:
        members = tar.getmembers()
    assert 0 < len(members) <= archive.MAX_ENTRIES
    assert all(
        m.isdir() or m.isfile() or (m.issym() and not m.linkname.startswith("/")) for m in members
    )
    with extracted(out) as root:
        assert (root / "sys/class/infiniband").is_dir()


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("sysfs snapshots are Linux-only", allow_module_level=True)
