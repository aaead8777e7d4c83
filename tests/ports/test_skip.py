"""``[ports] skip`` (issue #27): restricted NIC functions (DGX/HGX B200, GB200) make the kernel log
``ACCESS_REG ... failed`` on every counter read, and ``ignore`` still reads them. A skipped adapter is
never listed, opened or followed: checked with strace on the real console script (every file system
call the kernel saw), against a run without skip that does touch it."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile

import pytest

from ibdiag.errors import InputError
from ibdiag.node.manifest import MANIFEST
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import PortsConfig
from tests.support.env import SYSFS_FIXTURES, need_tool

DGX = SYSFS_FIXTURES / "dgx-h100"


def _traced(ibdiag_exe, tmp_path, argv, skip):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text(f"[ports]\nskip = {skip!r}\n".replace("'", '"'))
    log = tmp_path / "strace.log"
    res = subprocess.run(
        [
            need_tool("strace"),
            "-f",
            "-qq",
            "-e",
            "trace=%file",
            "-o",
            str(log),
            ibdiag_exe,
            *argv,
            "--root",
            str(DGX),
            "--config",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "IBDIAG_CONFIG": ""},
    )
    if "ptrace" in res.stderr and "Operation not permitted" in res.stderr:
        pytest.skip("ptrace is not permitted here")
    return res, log.read_text()


@pytest.mark.parametrize("argv", [["counters", "-o", "json"], ["topo", "-o", "json"]])
def test_a_skipped_adapter_is_never_touched(ibdiag_exe, tmp_path, argv):
    res, calls = _traced(ibdiag_exe, tmp_path, argv, [])
    assert "infiniband/mlx5_4" in calls  # the test can fail: without skip the adapter is read
    res, calls = _traced(ibdiag_exe, tmp_path, argv, ["mlx5_4", "mlx5_5"])
    assert res.returncode == 0, res.stderr
    assert "mlx5_4" not in calls and "mlx5_5" not in calls
    assert "infiniband/mlx5_3" in calls  # the others are read
    assert "mlx5_4" not in res.stdout and "mlx5_3" in res.stdout  # nor shown


def test_a_snapshot_never_reads_a_skipped_adapter_and_says_so(ibdiag_exe, tmp_path):
    """``ibdiag snapshot --config`` with ``[ports] skip``: no file system call names the adapter, the
    archive holds nothing of it, and its manifest names it (read back: topo sees the others only)."""
    full, skipping = tmp_path / "full.tar.gz", tmp_path / "skip.tar.gz"
    res, calls = _traced(ibdiag_exe, tmp_path, ["snapshot", str(full)], [])
    assert res.returncode == 0, res.stderr
    assert "infiniband/mlx5_4" in calls  # the control: without skip the snapshot reads it
    res, calls = _traced(ibdiag_exe, tmp_path, ["snapshot", str(skipping)], ["mlx5_4", "mlx5_5"])
    assert res.returncode == 0, res.stderr
    assert "mlx5_4" not in calls and "mlx5_5" not in calls
    assert "infiniband/mlx5_3" in calls
    assert "skipped ([ports] skip, named in the manifest): mlx5_4, mlx5_5" in res.stdout
    with tarfile.open(skipping) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(MANIFEST))
    assert not any("mlx5_4" in n or "mlx5_5" in n for n in names)
    assert any(n.startswith("sys/class/infiniband/mlx5_3") for n in names)
    assert manifest["skip"] == ["mlx5_4", "mlx5_5"]
    assert manifest["skipped_adapters"] == ["mlx5_4", "mlx5_5"]
    with tarfile.open(full) as tar:
        assert json.load(tar.extractfile(MANIFEST))["skipped_adapters"] == []
    topo = subprocess.run(
        [ibdiag_exe, "topo", "--root", str(skipping), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "IBDIAG_CONFIG": ""},
    )
    names = {a["name"] for a in json.loads(topo.stdout)["adapters"]}
    assert "mlx5_3" in names and not names & {"mlx5_4", "mlx5_5"}


def test_sysfs_root_answers_absent_for_a_skipped_adapter_and_its_device():
    sysfs = SysfsRoot(DGX, skip_adapters=("mlx5_1*",))
    names = sysfs.listdir("class/infiniband")
    assert "mlx5_1" not in names and "mlx5_10" not in names and "mlx5_2" in names
    assert sysfs.read("class/infiniband/mlx5_1/ports/1/state") is None
    assert not sysfs.exists("class/infiniband/mlx5_1") and not sysfs.is_dir(
        "class/infiniband/mlx5_1"
    )
    assert sysfs.resolve("class/infiniband/mlx5_1/device") is None and sysfs.problems == []
    # the snapshot's walk does not enter the device's own infiniband/NAME directory either
    real = SysfsRoot(DGX).resolve("class/infiniband/mlx5_1/device")
    assert real is not None
    walked = sysfs.walk_files(real)
    assert walked and not any("/infiniband/mlx5_1/" in f for f in walked)


def test_skip_takes_adapters_not_ports():
    assert PortsConfig(skip=("mlx5_1*",)).skip == ("mlx5_1*",)
    with pytest.raises(InputError, match="names a port; skip takes adapters"):
        PortsConfig(skip=("mlx5_3:1",))
