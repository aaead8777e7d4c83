"""ibdiag.bench.p2p.rdma.verbs through the REAL pyverbs (Debian's python3-pyverbs), no mocks of the library.

This machine has no RDMA device, so what runs here is: the import path (venv + Debian
dist-packages fallback), "pyverbs is not installed", "no RDMA device" from the real
``ibv_get_device_list``, and the translation of a connection plan into real pyverbs objects
(which need no device).
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from ibdiag.bench.p2p.rdma import verbs
from ibdiag.bench.p2p.rdma.plan import ConnectPlan
from ibdiag.errors import CannotRunError
from tests.support.env import unavailable


def _need_pyverbs() -> None:
    if not os.path.isdir(os.path.join(verbs.DEBIAN_DIST_PACKAGES, "pyverbs")):
        try:
            import pyverbs  # noqa: F401
        except ImportError:
            unavailable("python3-pyverbs is not installed (make system-deps)")


def _no_rdma_device() -> None:
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has an RDMA device; the no-device path cannot be shown here")


def _py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_import_falls_back_to_debian_dist_packages_appended_last():
    _need_pyverbs()
    r = _py(
        "import sys\n"
        "from ibdiag.bench.p2p.rdma import verbs\n"
        "before = list(sys.path)\n"
        "pv = verbs.import_pyverbs()\n"
        "print(pv.device.__file__)\n"
        "added = [p for p in sys.path if p not in before]\n"
        "print(added, sys.path[-1] == verbs.DEBIAN_DIST_PACKAGES or not added)\n"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "pyverbs" in lines[0]
    assert lines[1].endswith("True")  # appended at the end (or not needed at all)


def test_pyverbs_not_installed_is_exit_3_with_apt_hint():
    """The same import code with the fallback directory pointed at nothing: as on a host without python3-pyverbs."""
    r = _py(
        "from ibdiag.bench.p2p.rdma import verbs\n"
        "verbs.DEBIAN_DIST_PACKAGES = '/nonexistent/ibdiag-test'\n"
        "import sys\n"
        "sys.path[:] = [p for p in sys.path if 'dist-packages' not in p]\n"
        "from ibdiag.cli import app\n"
        "app(['bench', 'p2p', '127.0.0.1', '--transport', 'rdma', '--engine', 'ibdiag'], prog_name='ibdiag')\n"
    )
    assert r.returncode == 3, r.stderr
    assert "ibdiag: error: pyverbs is not installed" in r.stderr
    assert "hint: install rdma-core's Python bindings: apt-get install python3-pyverbs" in r.stderr
    assert "Traceback" not in r.stderr


def test_list_devices_without_a_device_is_exit_3():
    _need_pyverbs()
    _no_rdma_device()
    with pytest.raises(CannotRunError) as e:
        verbs.list_devices()
    assert e.value.message.startswith("no RDMA device")
    assert "ibv_devices" in (e.value.hint or "")


def test_cli_p2p_rdma_without_device(cli):
    _need_pyverbs()
    _no_rdma_device()
    r = cli("bench", "p2p", "127.0.0.1", "--port", "1", "--transport", "rdma")
    assert r.exit_code == 3
    assert "ibdiag: error: no RDMA device" in r.stderr
    assert "hint: " in r.stderr and "--transport tcp" in r.stderr


def test_cli_serve_rdma_without_device_fails_at_start(cli):
    _need_pyverbs()
    _no_rdma_device()
    r = cli("bench", "serve", "--transport", "rdma", "--bind", "127.0.0.1", "--port", "0")
    assert r.exit_code == 3
    assert "no RDMA device" in r.stderr
    assert "listening" not in r.stderr  # refused before listening


PLAN = ConnectPlan(
    port_num=1,
    pkey_index=0,
    path_mtu_bytes=1024,
    dest_qp_num=0x3B4,
    rq_psn=0x654321,
    sq_psn=0x123456,
    dlid=0,
    is_global=True,
    dgid="0000:0000:0000:0000:0000:ffff:0a00:0205",
    sgid_index=3,
    hop_limit=64,
    traffic_class=0,
    sl=0,
    timeout=14,
    retry_cnt=7,
    rnr_retry=7,
    min_rnr_timer=12,
    max_rd_atomic=1,
    max_dest_rd_atomic=1,
)


def test_plan_becomes_a_real_pyverbs_qp_attr():
    _need_pyverbs()
    pv = verbs.import_pyverbs()
    attr = verbs.build_qp_attr(PLAN)
    e = pv.enums
    assert isinstance(attr, pv.qp.QPAttr)
    assert attr.path_mtu == e.IBV_MTU_1024
    assert attr.dest_qp_num == 0x3B4 and attr.rq_psn == 0x654321 and attr.sq_psn == 0x123456
    assert attr.qp_access_flags == e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    assert (attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer) == (14, 7, 7, 12)
    assert attr.max_rd_atomic == 1 and attr.max_dest_rd_atomic == 1 and attr.port_num == 1
    ah = attr.ah_attr
    assert ah.is_global == 1 and ah.sgid_index == 3 and ah.hop_limit == 64 and ah.port_num == 1
    assert str(ah.dgid) == PLAN.dgid


def test_lid_routed_plan_has_no_grh():
    _need_pyverbs()
    from dataclasses import replace

    attr = verbs.build_qp_attr(
        replace(PLAN, is_global=False, dgid=None, sgid_index=None, dlid=0x12, path_mtu_bytes=4096)
    )
    assert attr.ah_attr.is_global == 0 and attr.ah_attr.dlid == 0x12
    assert attr.path_mtu == verbs.import_pyverbs().enums.IBV_MTU_4096


def test_write_work_requests_are_real_and_selectively_signalled():
    _need_pyverbs()
    pv = verbs.import_pyverbs()
    e = pv.enums
    plain = verbs.build_write_wr(
        pv, addr=0x1000, length=4096, lkey=0x11, remote_addr=0x2000, rkey=0x22, signaled=False
    )
    signaled = verbs.build_write_wr(
        pv, addr=0x1000, length=4096, lkey=0x11, remote_addr=0x2000, rkey=0x22, signaled=True
    )
    assert plain.opcode == e.IBV_WR_RDMA_WRITE and plain.num_sge == 1
    assert plain.send_flags == 0 and signaled.send_flags == e.IBV_SEND_SIGNALED
    plain.wr_id = 41
    assert plain.wr_id == 41


def test_port_attributes_map_to_sysfs_names():
    state = verbs.port_state_from_attr(
        SimpleNamespace(state=4, phys_state=5, link_layer=2, lid=0, active_mtu=3)
    )
    assert state == verbs.PortState("ACTIVE", "LinkUp", "Ethernet", 0, 1024)
    ib = verbs.port_state_from_attr(
        SimpleNamespace(state=1, phys_state=2, link_layer=1, lid=0x3A4, active_mtu=5)
    )
    assert (ib.state, ib.phys_state, ib.link_layer, ib.lid, ib.active_mtu_bytes) == (
        "DOWN",
        "Polling",
        "InfiniBand",
        0x3A4,
        4096,
    )


def test_qp_init_attr_turns_off_signal_all():
    """pyverbs defaults sq_sig_all to 1 (every WRITE completes); the QP ibdiag creates has it at 0."""
    _need_pyverbs()
    pv = verbs.import_pyverbs()
    init = verbs.build_qp_init_attr(pv, None, 128)
    assert isinstance(init, pv.qp.QPInitAttr)
    assert init.sq_sig_all == 0
    assert init.qp_type == pv.enums.IBV_QPT_RC
    assert init.cap.max_send_wr == 128 and init.cap.max_send_sge == 1
    assert (
        pv.qp.QPInitAttr(qp_type=pv.enums.IBV_QPT_RC).sq_sig_all == 1
    )  # the library default this overrides


#: A pyverbs without ``pyverbs.enums`` (rdma-core >= 59): the real modules (loaded first), except that importing
#: ``pyverbs.enums`` fails and the constants come from a ``pyverbs.libibverbs_enums`` made of enum
#: classes with the real values (Cython 3 ``cpdef enum``), plus one anonymous module-level constant.
_NEW_RDMA_CORE = """
import enum, sys, types
from ibdiag.bench.p2p.rdma import verbs
sys.path.append(verbs.DEBIAN_DIST_PACKAGES)
import pyverbs.enums as real
import pyverbs.addr, pyverbs.cq, pyverbs.device, pyverbs.mr, pyverbs.pd, pyverbs.qp, pyverbs.wr  # they import enums themselves
sys.modules['pyverbs.enums'] = None  # 'import pyverbs.enums' now raises ImportError
import pyverbs
del pyverbs.enums
lib = types.ModuleType('pyverbs.libibverbs_enums')
groups = {'ibv_qp_type': 'IBV_QPT_', 'ibv_qp_state': 'IBV_QPS_', 'ibv_access_flags': 'IBV_ACCESS_',
          'ibv_wr_opcode': 'IBV_WR_', 'ibv_send_flags': 'IBV_SEND_', 'ibv_wc_status': 'IBV_WC_', 'ibv_mtu': 'IBV_MTU_'}
for cls, prefix in groups.items():
    members = {n: int(getattr(real, n)) for n in dir(real) if n.startswith(prefix)}
    setattr(lib, cls, enum.IntEnum(cls, members))
lib.IBV_LINK_LAYER_ETHERNET = int(real.IBV_LINK_LAYER_ETHERNET)
sys.modules['pyverbs.libibverbs_enums'] = lib
pyverbs.libibverbs_enums = lib
pv = verbs.import_pyverbs()
assert not hasattr(pv.enums, '__file__'), pv.enums
init = verbs.build_qp_init_attr(pv, None, 64)
wr = verbs.build_write_wr(pv, addr=4096, length=8, lkey=1, remote_addr=8192, rkey=2, signaled=True)
print(init.sq_sig_all, init.qp_type == real.IBV_QPT_RC, wr.opcode == real.IBV_WR_RDMA_WRITE,
      wr.send_flags == real.IBV_SEND_SIGNALED, pv.enums.IBV_WC_SUCCESS == real.IBV_WC_SUCCESS,
      pv.enums.IBV_LINK_LAYER_ETHERNET == 2)
"""


def test_enums_fall_back_to_libibverbs_enums_on_new_rdma_core():
    _need_pyverbs()
    r = _py(_NEW_RDMA_CORE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "True", "True", "True", "True", "True"]


def test_flatten_enums_takes_class_members_and_module_constants():
    import enum

    mod = SimpleNamespace(
        ibv_qp_type=enum.IntEnum("ibv_qp_type", {"IBV_QPT_RC": 2, "IBV_QPT_UD": 4}),
        IBV_LINK_LAYER_ETHERNET=2,
        helper=len,
    )
    flat = verbs.flatten_enums(mod)
    assert (flat.IBV_QPT_RC, flat.IBV_QPT_UD, flat.IBV_LINK_LAYER_ETHERNET) == (2, 4, 2)
    assert not hasattr(flat, "helper")


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (2, "port or netdev went down"),
        (12, "transport retries exceeded"),
        (13, "no receive posted"),
        (5, "first error above"),
        (99, "peer went away"),
    ],
)
def test_a_failed_completion_is_explained_by_its_status(status, words):
    """A link going down on Soft-RoCE ends WRITEs with status 2 (local QP operation error), not a
    retry timeout: the hint must say what that status means (found by the two-node guest test)."""
    from ibdiag.bench.p2p.rdma.endpoint import _wc_status_hint

    assert words in _wc_status_hint(status)
