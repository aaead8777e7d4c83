"""The software versions topo reports: the kernel release and each adapter's driver module version.

Read from the fixture trees (generated ones in the kernel's formats, and the rxe-guest tree captured
from a real kernel) and from hostile trees built in tmp_path, through the real code path.
"""

import json
import os
import shutil

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import MAX_VALUE_BYTES, SysfsRoot
from ibdiag.topo.checks import check_topology
from ibdiag.topo.views import prom_metrics, summary_lines
from tests.support.env import SYSFS_FIXTURES
from tests.sysfsgen.builder import Tree, zero_counters

MELLANOX = 0x15B3


def topo_doc(cli, root):
    res = cli("topo", "--root", root, "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    return json.loads(res.stdout)


def drivers(doc):
    return {
        (a["driver_module"], a["driver_version"], a["driver_version_kind"]) for a in doc["adapters"]
    }


def test_mofed_node_reports_kernel_and_mlx5_core_version(cli):
    doc = topo_doc(cli, SYSFS_FIXTURES / "dgx-h100")
    assert (doc["kernel_release"], doc["kernel_release_source"]) == (
        "5.15.0-1063-nvidia",
        "/proc/sys/kernel/osrelease",
    )
    # The out-of-tree module has both files: the version is reported, and said to be one.
    assert drivers(doc) == {("mlx5_core", "24.07-0.6.1", "version")}
    assert len(doc["adapters"]) == 12


def test_in_tree_driver_with_srcversion_only(cli):
    doc = topo_doc(cli, SYSFS_FIXTURES / "roce-node")
    assert doc["kernel_release"] == "5.15.0-119-generic"
    assert drivers(doc) == {("mlx5_core", "A1F3E8C27D45B9066C1E2D4", "srcversion")}


def test_real_kernel_capture_rdma_rxe_has_neither_file_and_the_manifest_has_the_release(cli):
    # Captured from Debian's 6.1.0-57-amd64 (CONFIG_MODULE_SRCVERSION_ALL not set, rdma_rxe without
    # MODULE_VERSION): no version, no srcversion — unknown, not guessed. The tree has no proc/; the
    # snapshot was taken from / so its manifest's kernel is the guest's own.
    root = SYSFS_FIXTURES / "rxe-guest"
    assert not (root / "sys/module/rdma_rxe/version").exists() and not (root / "proc").exists()
    doc = topo_doc(cli, root)
    assert (doc["kernel_release"], doc["kernel_release_source"]) == (
        "6.1.0-57-amd64",
        "snapshot manifest",
    )
    assert drivers(doc) == {("rdma_rxe", None, None)}
    assert not [f for f in doc["findings"] if f["check"] == "topo.sysfs_value"]


def test_driver_module_found_through_the_bound_drivers_module_link(cli):
    root = SYSFS_FIXTURES / "bnxt-roce"
    assert os.readlink(root / "sys/bus/pci/drivers/bnxt_en/module") == "../../../../module/bnxt_en"
    doc = topo_doc(cli, root)
    assert drivers(doc) == {("bnxt_en", None, None)}
    assert doc["kernel_release"] is None and doc["kernel_release_source"] is None


def test_text_and_prometheus_show_the_versions(cli):
    res = cli("topo", "--root", SYSFS_FIXTURES / "dgx-h100")
    assert (
        "Kernel: 5.15.0-1063-nvidia   RDMA driver: mlx5_core 24.07-0.6.1 (12 adapters)"
        in res.stdout
    )
    res = cli("topo", "--root", SYSFS_FIXTURES / "roce-node")
    assert "RDMA driver: mlx5_core srcversion A1F3E8C27D45B9066C1E2D4 (4 adapters)" in res.stdout
    res = cli("topo", "--root", SYSFS_FIXTURES / "rxe-guest")
    assert (
        "Kernel: 6.1.0-57-amd64 (from the snapshot manifest)   RDMA driver: rdma_rxe, no version or srcversion (rxe0)"
        in res.stdout
    )
    prom = cli("topo", "--root", SYSFS_FIXTURES / "roce-node", "-o", "prom").stdout
    assert 'ibdiag_topo_kernel_info{release="5.15.0-119-generic"} 1' in prom
    assert (
        'ibdiag_topo_rdma_driver_info{device="mlx5_0",module="mlx5_core",version="A1F3E8C27D45B9066C1E2D4",version_kind="srcversion"} 1'
        in prom
    )
    prom = cli("topo", "--root", SYSFS_FIXTURES / "rxe-guest", "-o", "prom").stdout
    assert (
        'ibdiag_topo_rdma_driver_info{device="rxe0",module="rdma_rxe",version="",version_kind="unknown"} 1'
        in prom
    )


# --- hostile and broken trees ------------------------------------------------------------------------


def mlx5_node(tmp_path, *, version="24.10-1.1.4", srcversion=None, release="6.8.0-45-generic"):
    t = Tree(tmp_path)
    t.numa(0, "0-7")
    t.module("mlx5_core", version, srcversion)
    if release is not None:
        t.kernel(release)
    hb = t.host_bridge("0000:10")
    hb.numa, hb.cpulist = 0, "0-7"
    dev = hb.bridge("0000:10:01.0").add(
        "0000:11:00.0", vendor=MELLANOX, device=0x1021, cls=0x020700
    )
    ib = dev.rdma(
        "mlx5_0",
        fw_ver="28.39.1002",
        board_id="b",
        hca_type="MT4129",
        node_guid="0000:0000:0000:0001",
    )
    ib.port(
        1,
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate="400 Gb/sec (4X NDR)",
        counters=zero_counters(),
    )
    return t


def warnings(topo):
    return sorted(
        (f.subject, f.message)
        for f in check_topology(topo)
        if f.severity is Severity.WARN and f.check == "topo.sysfs_value"
    )


def test_a_good_tree_reads_clean(tmp_path):
    mlx5_node(tmp_path)
    topo = discover(SysfsRoot(tmp_path))
    assert (topo.kernel_release, topo.kernel_release_source) == (
        "6.8.0-45-generic",
        "/proc/sys/kernel/osrelease",
    )
    (a,) = topo.adapters
    assert (a.module.name, a.module.version_text, a.module.version_kind) == (
        "mlx5_core",
        "24.10-1.1.4",
        "version",
    )
    assert warnings(topo) == [] and topo.problems == ()


@pytest.mark.parametrize(
    "release, words",
    [
        ("6.8.0 -45", "not a kernel release"),
        ("6" * 65, "not a kernel release"),
        ("6.8.0\x1b[2J", "control characters"),
        ("x" * (MAX_VALUE_BYTES + 10), "more than 65536 bytes"),
    ],
)
def test_malformed_or_oversized_kernel_release_is_a_warning_and_unknown(tmp_path, release, words):
    mlx5_node(tmp_path, release=release)
    topo = discover(SysfsRoot(tmp_path))
    assert topo.kernel_release is None and topo.kernel_release_source is None
    (warning,) = warnings(topo)
    assert warning[0] == "/proc/sys/kernel/osrelease" and words in warning[1]
    assert "Kernel: unknown" in summary_lines(topo)[1]


def test_a_bad_osrelease_is_not_replaced_by_the_manifests_word(tmp_path):
    mlx5_node(tmp_path, release="bad release")
    (tmp_path / "ibdiag-snapshot.json").write_text(
        json.dumps({"schema": "ibdiag.snapshot/1", "kernel_release": "6.8.0-45-generic"})
    )
    topo = discover(SysfsRoot(tmp_path))
    assert topo.kernel_release is None


@pytest.mark.parametrize(
    "version, srcversion, words",
    [
        ("24.10\x07", None, "control characters"),
        ("2" * 65, None, "not a module version"),
        ("v" * (MAX_VALUE_BYTES + 1), None, "more than 65536 bytes"),
        (None, "a1f3e8c27d45b9066c1e2d4", "not a module srcversion"),  # modpost prints upper case
        (None, "XYZ", "not a module srcversion"),
    ],
)
def test_malformed_or_oversized_module_version_is_a_warning_and_unknown(
    tmp_path, version, srcversion, words
):
    mlx5_node(tmp_path, version=version, srcversion=srcversion)
    topo = discover(SysfsRoot(tmp_path))
    (a,) = topo.adapters
    assert (
        a.module.name == "mlx5_core"
        and a.module.version_text is None
        and a.module.version_kind is None
    )
    (warning,) = warnings(topo)
    assert warning[0].startswith("/sys/module/mlx5_core/") and words in warning[1]
    assert a.to_json()["driver_version"] is None and a.to_json()["driver_version_kind"] is None


def test_version_falls_back_to_srcversion(tmp_path):
    mlx5_node(tmp_path, version=None, srcversion="0716E17594E7E6D0EC026C5")
    (a,) = discover(SysfsRoot(tmp_path)).adapters
    assert (a.module.version_text, a.module.version_kind) == (
        "0716E17594E7E6D0EC026C5",
        "srcversion",
    )


def test_a_module_shared_by_adapters_is_read_once(tmp_path):
    t = mlx5_node(tmp_path, version="bad\x01")
    hb = t.host_bridge("0000:20")
    hb.numa, hb.cpulist = 0, "0-7"
    dev = hb.bridge("0000:20:01.0").add(
        "0000:21:00.0", vendor=MELLANOX, device=0x1021, cls=0x020700
    )
    dev.rdma(
        "mlx5_1",
        fw_ver="28.39.1002",
        board_id="b",
        hca_type="MT4129",
        node_guid="0000:0000:0000:0002",
    ).port(
        1,
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate="400 Gb/sec (4X NDR)",
        counters=zero_counters(),
    )
    topo = discover(SysfsRoot(tmp_path))
    assert [a.module.name for a in topo.adapters] == ["mlx5_core", "mlx5_core"]
    assert [w[0] for w in warnings(topo)] == [
        "/sys/module/mlx5_core/version"
    ]  # once, not per adapter


def test_proc_linked_to_the_hosts_proc_is_refused(tmp_path):
    """A tree whose proc/ is a link to the host's /proc must not report the host's kernel as its own."""
    mlx5_node(tmp_path, release=None)
    os.symlink("/proc", tmp_path / "proc")
    topo = discover(SysfsRoot(tmp_path))
    assert topo.kernel_release is None
    (warning,) = warnings(topo)
    assert warning[0] == "/proc/sys/kernel/osrelease" and "leads outside" in warning[1]


def test_osrelease_linked_out_of_the_tree_or_a_fifo_is_refused(tmp_path):
    mlx5_node(tmp_path, release=None)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    os.symlink("/proc/sys/kernel/osrelease", tmp_path / "proc/sys/kernel/osrelease")
    topo = discover(SysfsRoot(tmp_path))
    assert topo.kernel_release is None and "refused" in warnings(topo)[0][1]
    os.unlink(tmp_path / "proc/sys/kernel/osrelease")
    os.mkfifo(tmp_path / "proc/sys/kernel/osrelease")
    topo = discover(SysfsRoot(tmp_path))  # never blocks on the FIFO
    assert topo.kernel_release is None and "FIFO" in warnings(topo)[0][1]


@pytest.mark.parametrize(
    "manifest, expected, warned",
    [
        (
            {
                "kernel_release": "6.8.0-45-generic",
                "kernel": "6.1.0-1-amd64",
                "source_root": "/srv/x",
            },
            "6.8.0-45-generic",
            False,
        ),
        ({"kernel": "6.1.0-57-amd64", "source_root": "/"}, "6.1.0-57-amd64", False),
        # An older snapshot of another tree: its "kernel" was the capturing machine's, not the tree's.
        ({"kernel": "6.1.0-57-amd64", "source_root": "/work/fixtures/x"}, None, False),
        (
            {"kernel_release": None, "kernel": "6.1.0-57-amd64", "source_root": "/work/x"},
            None,
            False,
        ),
        ({"kernel_release": "6.8 \x1b[31m"}, None, True),
        ({"kernel_release": ["6.8.0"]}, None, True),
    ],
)
def test_snapshot_manifest_release(tmp_path, manifest, expected, warned):
    mlx5_node(tmp_path, release=None)
    (tmp_path / "ibdiag-snapshot.json").write_text(
        json.dumps({"schema": "ibdiag.snapshot/1", **manifest})
    )
    topo = discover(SysfsRoot(tmp_path))
    assert topo.kernel_release == expected
    assert topo.kernel_release_source == ("snapshot manifest" if expected else None)
    assert [w[0] for w in warnings(topo)] == (["ibdiag-snapshot.json"] if warned else [])


def test_prom_info_metrics_without_a_kernel_or_module(tmp_path):
    t = mlx5_node(tmp_path, release=None)
    shutil.rmtree(t.root / "sys/module/mlx5_core")
    topo = discover(SysfsRoot(tmp_path))
    metrics = {m.name: m for m in prom_metrics(topo)}
    assert metrics["ibdiag_topo_kernel_info"].samples == ()
    (sample,) = metrics["ibdiag_topo_rdma_driver_info"].samples
    assert sample.labels == {
        "device": "mlx5_0",
        "module": "",
        "version": "",
        "version_kind": "unknown",
    }
    assert topo.adapters[0].to_json()["driver_module"] is None


@pytest.mark.parametrize(
    "srcversion",
    # /sys/module/{configfs,virtio_pci,virtio_pci_legacy_dev}/srcversion in the test bed's guest (Debian 6.1.0-57-amd64).
    ["C49398E125FFAC361463008", "2526A0E335FCA2331138131", "B166D1C71CE630F00545238"],
)
def test_real_srcversions_parse(srcversion):
    from ibdiag.parse import parse_srcversion

    assert parse_srcversion(srcversion) == srcversion
