"""Which kernel driver an RDMA device belongs to, and whether it is a software device (rxe, siw).

The driver decides the vocabulary of ``hw_counters/`` (:mod:`ibdiag.counters.spec`) and whether the
port's ``rate``, ``fw_ver`` and PCI facts mean anything: a software device has no firmware (an empty
``fw_ver``) and no PCI function, and its line rate is its netdev's speed.
"""

from __future__ import annotations

from ibdiag.sysfs import SysfsRoot

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
_NAME_PREFIXES = (("mlx5_", "mlx5"), ("mlx4_", "mlx4"), ("bnxt_re", "bnxt_re"), ("irdma", "irdma"), ("efa_", "efa"), ("rxe", "rxe"), ("siw", "siw"))


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


def is_software(driver: str | None) -> bool:
    return driver in SOFTWARE_DRIVERS


def software_netdev(sysfs: SysfsRoot, adapter: str) -> str | None:
    """The netdev a software device runs over: rxe's ``parent`` attribute (rxe_verbs.c parent_show)."""
    return _quiet(sysfs, f"class/infiniband/{adapter}/parent")
