"""Which kernel driver an RDMA device belongs to, and whether it is a software device (rxe, siw).

The driver decides the vocabulary of ``hw_counters/`` (:mod:`ibdiag.counters.hw_spec`) and whether the
port's ``rate``, ``fw_ver`` and PCI facts mean anything: a software device has no firmware (an empty
``fw_ver``) and no PCI function, and its line rate is its netdev's speed.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from ibdiag.node.sysfs import SysfsRoot
from ibdiag.text import safe_value

#: Drivers that implement RDMA in the kernel over an ordinary netdev (Soft-RoCE, Soft-iWARP).
SOFTWARE_DRIVERS = frozenset({"rxe", "siw"})

#: ``device/driver`` link name -> the RDMA driver. The hardware drivers bind the PCI function (mlx5_core,
#: bnxt_en, ice/i40e/idpf, efa) or, on newer kernels, an auxiliary device of it (bnxt_re, irdma).
_BOUND_DRIVERS = {
    "mlx5_core": "mlx5",
    "mlx5_ib": "mlx5",
    "mlx4_core": "mlx4",
    "bnxt_en": "bnxt_re",
    "bnxt_re": "bnxt_re",
    "ice": "irdma",
    "i40e": "irdma",
    "idpf": "irdma",
    "irdma": "irdma",
    "efa": "efa",
}

#: Device-name prefixes the drivers give their devices, for trees without a ``device/driver`` link.
_NAME_PREFIXES = (
    ("mlx5_", "mlx5"),
    ("mlx4_", "mlx4"),
    ("bnxt_re", "bnxt_re"),
    ("irdma", "irdma"),
    ("efa_", "efa"),
    ("rxe", "rxe"),
    ("siw", "siw"),
)


def _quiet(sysfs: SysfsRoot, rel: str) -> str | None:
    before = len(sysfs.problems)
    value = sysfs.read(rel)
    del sysfs.problems[before:]
    return value


def rdma_driver(sysfs: SysfsRoot, adapter: str) -> str | None:
    """``mlx5``, ``rxe``, ``siw``, ``bnxt_re``, ``irdma``, ``efa`` ...; None when nothing says.

    Software devices first: rxe has a ``parent`` attribute naming its netdev
    (drivers/infiniband/sw/rxe/rxe_verbs.c, parent_show) and the node description ``rxe`` (rxe.c);
    siw's node description is ``Software iWARP stack`` (drivers/infiniband/sw/siw/siw.h). Then the
    driver bound to the ``device`` the RDMA device hangs off, then the name the driver gives it.
    """
    base = f"class/infiniband/{adapter}"
    desc = _quiet(sysfs, f"{base}/node_desc") or ""
    if sysfs.exists(f"{base}/parent") or desc == "rxe":
        return "rxe"
    if desc.startswith("Software iWARP"):
        return "siw"
    bound = sysfs.resolve(f"{base}/device/driver")
    if bound is not None:
        name = bound.rsplit("/", 1)[-1]
        if name in _BOUND_DRIVERS:
            return _BOUND_DRIVERS[name]
    for prefix, driver in _NAME_PREFIXES:
        if adapter.startswith(prefix):
            return driver
    return None


def is_software(driver: str | None) -> TypeGuard[str]:
    return driver in SOFTWARE_DRIVERS


def software_netdev(sysfs: SysfsRoot, adapter: str) -> str | None:
    """The netdev a software device runs over: rxe's ``parent`` attribute (rxe_verbs.c parent_show)."""
    return _quiet(sysfs, f"class/infiniband/{adapter}/parent")


#: The module of an RDMA driver's device when sysfs has no driver link to follow (generated fixtures,
#: snapshots taken by older ibdiag versions): mlx5's and mlx4's PCI drivers are mlx5_core and mlx4_core
#: (drivers/net/ethernet/mellanox/), bnxt_re's devices hang off bnxt_en's PCI function, efa binds its
#: own; Soft-RoCE is the module rdma_rxe (drivers/infiniband/sw/rxe/Makefile), Soft-iWARP siw.
#: irdma is left out: its PCI function belongs to ice, i40e or idpf, which only the link can tell.
_DRIVER_MODULES = {
    "mlx5": "mlx5_core",
    "mlx4": "mlx4_core",
    "bnxt_re": "bnxt_en",
    "efa": "efa",
    "rxe": "rdma_rxe",
    "siw": "siw",
}


#: A module's name: at most MODULE_NAME_LEN - 1 = 55 characters (include/linux/module.h, 64-bit),
#: made of what a file name under scripts/Makefile.lib's KBUILD_MODNAME can hold ('-' becomes '_').
_MODULE_NAME_RE = re.compile(r"[A-Za-z0-9_]{1,55}")


def driver_module(sysfs: SysfsRoot, adapter: str, driver: str | None) -> str | None:
    """The kernel module behind the RDMA device ``adapter`` (``lsmod`` name): the module of the driver
    bound to its ``device`` (``mlx5_core``, ``bnxt_en``: the PCI driver, which MLNX_OFED/DOCA-OFED
    version together with mlx5_ib), or for a software device its RDMA module (``rdma_rxe``, ``siw``).

    Found by following ``device/driver/module`` (``/sys/bus/pci/drivers/<drv>/module`` links to
    ``/sys/module/<name>``, drivers/base/module.c), else the bound driver's name when
    ``module/<name>`` exists (a PCI driver is named after its module; an auxiliary driver
    ``<module>.<name>``, drivers/base/auxiliary.c), else :data:`_DRIVER_MODULES` when that module is
    loaded. None when nothing says.
    """
    base = f"class/infiniband/{adapter}"
    if is_software(driver):
        name: str | None = _DRIVER_MODULES[driver]  # the lookup at the end may find none
        return name if sysfs.is_dir(f"module/{name}") else None
    module = sysfs.resolve(f"{base}/device/driver/module")
    if module is not None and module.startswith("module/") and module.count("/") == 1:
        name = module.split("/", 1)[1]
        if _MODULE_NAME_RE.fullmatch(name):
            return name
        sysfs.record(
            f"{base}/device/driver/module",
            "malformed",
            f"links to module {safe_value(name)}, not a module name",
        )
    bound = sysfs.resolve(f"{base}/device/driver")
    if bound is not None:
        name = bound.rsplit("/", 1)[-1].split(".", 1)[0]
        if _MODULE_NAME_RE.fullmatch(name) and sysfs.is_dir(f"module/{name}"):
            return name
    name = _DRIVER_MODULES.get(driver or "")
    if name is not None and sysfs.is_dir(f"module/{name}"):
        return name
    return None
