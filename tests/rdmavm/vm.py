"""Boot a throwaway Linux guest with a real kernel RDMA stack (Soft-RoCE) and run a command in it.

This machine's kernel has no RDMA core, so the RDMA tests run in a guest: qemu (software emulation,
TCG) boots Debian's distribution kernel with a busybox initramfs that mounts the host's root
filesystem over virtio-9p, read-only, under a tmpfs overlay. The guest therefore sees the same
Python, venv, pyverbs, perftest and checkout as the host, loads ``rdma_rxe`` and creates rxe devices
over a network device:

* one node (``Node.single``): a veth pair; one rxe device on ``veth0`` reached over its own address
  loops back inside rxe, so a server and a client in the same guest talk over a real RDMA stack;
* two nodes (``Node.pair``): two guests joined by a qemu socket netdev (``eth0``, 10.77.1.1 and
  10.77.1.2), two kernels, one rxe device over each ``eth0``. Node 0's qemu listens on 127.0.0.1 and
  node 1's connects: start node 0 first and node 1 only once it listens (qemu takes the first
  connection as its peer; tests/rdmavm/test_guests.py looks it up in /proc/net/tcp).

Results come back through a second 9p export, the run directory, mounted at ``/mnt/out`` in the
guest (``$IBDIAG_RDMAVM_OUT``). ``/tmp`` inside the guest is its own tmpfs; a checkout under the
host's ``/tmp`` is mounted there separately, read-only.

What is installed, from Debian's packages, when missing (root only): qemu-system-x86, kmod, cpio,
busybox-static, perftest, iproute2; the kernel is whatever ``linux-image-amd64`` depends on today,
downloaded with ``apt-get download`` and unpacked into :data:`CACHE` once.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("IBDIAG_RDMAVM_CACHE", "/var/cache/ibdiag-rdmavm"))

#: command -> the Debian package that provides it.
HOST_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "depmod": "kmod",
    "cpio": "cpio",
    "ib_write_bw": "perftest",
    "rdma": "iproute2",
}
#: The initramfs needs a static busybox (it runs before any library is reachable).
BUSYBOX = Path("/bin/busybox")

#: Modules the initramfs loads (with what they depend on) before the root can be mounted.
INITRD_MODULES = ("virtio_pci", "virtio_net", "9pnet_virtio", "9p", "overlay")
#: Modules the guest loads after switching root (/lib/modules comes from the cache).
GUEST_MODULES = ("rdma_rxe", "ib_uverbs", "rdma_ucm", "veth")

#: Addresses: the single node's veth0, and the two nodes of a pair on eth0.
SINGLE_ADDR = "10.77.0.1"
PAIR_ADDRS = ("10.77.1.1", "10.77.1.2")

INITRD_FORMAT = 2  # bump when init_script() changes so cached initramfs images are rebuilt


class Unavailable(Exception):
    """The guest cannot be booted here (no root to install tools, no qemu, no kernel package)."""


def _have_package(name: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def missing_packages() -> list[str]:
    need = sorted({pkg for cmd, pkg in HOST_TOOLS.items() if shutil.which(cmd) is None})
    if not BUSYBOX.exists() or not _have_package("busybox-static"):
        need.append("busybox-static")
    return need


def ensure_host_packages() -> None:
    """Install what is missing with apt-get (root), or raise Unavailable naming it."""
    need = missing_packages()
    if not need:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(
            f"the RDMA test bed needs {' '.join(need)} (apt-get install them, as root)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    r = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *need],
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise Unavailable(f"apt-get install {' '.join(need)} failed: {r.stderr.strip()[-500:]}")
    still = missing_packages()
    if still:
        raise Unavailable(f"still missing after apt-get install: {' '.join(still)}")


# --- the kernel ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    version: str
    root: Path
    """The unpacked package: ``boot/vmlinuz-<version>``, ``lib/modules/<version>``."""

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.version}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.version


def kernel_package() -> str:
    """The package ``linux-image-amd64`` depends on today, e.g. ``linux-image-6.1.0-57-amd64``."""
    r = subprocess.run(
        ["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True
    )
    m = re.search(r"Depends:\s+(linux-image-\d\S*)", r.stdout)
    if m is None:
        raise Unavailable("cannot resolve linux-image-amd64 with apt-cache (run apt-get update)")
    return m.group(1)


def fetch_kernel(cache: Path = CACHE) -> Kernel:
    """Download and unpack the current Debian kernel into ``cache`` (once; later calls reuse it)."""
    pkg = kernel_package()
    version = pkg.removeprefix("linux-image-")
    kernel = Kernel(version, cache / version)
    if kernel.vmlinuz.is_file() and (kernel.modules / "modules.dep").is_file():
        return kernel
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Unavailable(f"cannot create the kernel cache {cache}: {e}") from None
    part = cache / f"{version}.part"
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    r = subprocess.run(["apt-get", "download", "-q", pkg], cwd=part, capture_output=True, text=True)
    debs = list(part.glob("*.deb"))
    if r.returncode != 0 or not debs:
        raise Unavailable(f"apt-get download {pkg} failed: {r.stderr.strip()[-500:]}")
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(part)], check=True)
    debs[0].unlink()
    subprocess.run(["depmod", "-b", str(part), version], check=True)
    shutil.rmtree(kernel.root, ignore_errors=True)
    part.rename(kernel.root)
    return kernel


def module_closure(modules_dep: str, names: Iterable[str]) -> list[str]:
    """Paths (relative to the modules dir) of ``names`` and their dependencies, dependencies first.

    ``modules_dep`` is the text of ``modules.dep`` (``path: dep dep ...``); a name is a module's
    file name without ``.ko[.xz|.zst]``, with ``-`` and ``_`` equal, as modprobe treats them.
    Built-in modules (absent from the file) are skipped.
    """
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        path, sep, rest = line.partition(":")
        if not sep:
            continue
        deps[path] = rest.split()
        by_name[_module_name(path)] = path
    out: list[str] = []

    def visit(path: str, stack: tuple[str, ...]) -> None:
        if path in out or path in stack:
            return
        for d in deps.get(path, ()):
            visit(d, (*stack, path))
        out.append(path)

    for n in names:
        path = by_name.get(n.replace("-", "_"))
        if path is not None:
            visit(path, ())
    return out


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return re.sub(r"\.ko(\.xz|\.zst|\.gz)?$", "", base).replace("-", "_")


def init_script(modules: list[str]) -> str:
    """/init of the initramfs: load the modules, mount host root (9p) under a tmpfs overlay and the
    run directory at /mnt/out, then switch to the host's root and run /mnt/out/stage.sh."""
    loads = "\n".join(
        f"insmod /mods/{Path(m).name} || echo 'rdmavm: insmod {Path(m).name} failed'"
        for m in modules
    )
    return f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
{loads}
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /lower || echo 'rdmavm: no host root'
mount -t tmpfs -o size=75% tmpfs /rw; mkdir -p /rw/up /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/up,workdir=/rw/work /newroot
mkdir -p /newroot/mnt/out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rundir /newroot/mnt/out || echo 'rdmavm: no run dir'
for d in proc sys dev; do mount --move /$d /newroot/$d; done
exec switch_root /newroot /bin/sh /mnt/out/stage.sh
"""


def _decompress_cmd(path: str) -> list[str] | None:
    if path.endswith(".xz"):
        return ["xz", "-dc", path]
    if path.endswith(".zst"):
        return ["zstd", "-dc", path]
    return None


def build_initrd(kernel: Kernel, cache: Path = CACHE) -> Path:
    """The initramfs for ``kernel`` (busybox + the 9p/overlay/virtio modules), built once."""
    image = cache / f"initrd-{kernel.version}-{INITRD_FORMAT}.gz"
    if image.is_file():
        return image
    modules = module_closure((kernel.modules / "modules.dep").read_text(), INITRD_MODULES)
    work = cache / f"initrd-{kernel.version}.work"
    shutil.rmtree(work, ignore_errors=True)
    for d in ("bin", "mods", "proc", "sys", "dev"):
        (work / d).mkdir(parents=True)
    shutil.copy2(BUSYBOX, work / "bin" / "busybox")
    names = []
    for m in modules:
        src = kernel.modules / m
        name = re.sub(r"\.(xz|zst)$", "", src.name)
        cmd = _decompress_cmd(str(src))
        if cmd is None:
            shutil.copy2(src, work / "mods" / name)
        else:
            with open(work / "mods" / name, "wb") as f:
                subprocess.run(cmd, stdout=f, check=True)
        names.append(name)
    init = work / "init"
    init.write_text(init_script(names))
    init.chmod(0o755)
    listing = subprocess.run(
        ["find", "."], cwd=work, capture_output=True, text=True, check=True
    ).stdout
    cpio = subprocess.run(
        ["cpio", "-o", "-H", "newc", "--quiet"],
        cwd=work,
        input=listing.encode(),
        capture_output=True,
        check=True,
    ).stdout
    import gzip

    part = image.with_suffix(".part")
    part.write_bytes(gzip.compress(cpio, compresslevel=1))
    part.rename(image)
    shutil.rmtree(work, ignore_errors=True)
    return image


# --- one guest -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """How a guest is networked and where its rxe device sits."""

    netdev: str
    addr: str
    peer: str | None = None
    qemu_net: tuple[str, ...] = ()

    @classmethod
    def single(cls) -> Node:
        return cls("veth0", SINGLE_ADDR)

    @classmethod
    def pair(cls, index: int, port: int) -> Node:
        """Node ``index`` (0 listens, 1 connects) of two guests joined on 127.0.0.1:``port``."""
        mode = "listen" if index == 0 else "connect"
        mac = f"52:54:00:77:01:{index + 1:02x}"
        net = (
            "-netdev",
            f"socket,id=n0,{mode}=127.0.0.1:{port}",
            "-device",
            f"virtio-net-pci,netdev=n0,mac={mac}",
        )
        return cls("eth0", PAIR_ADDRS[index], PAIR_ADDRS[1 - index], net)


def stage_script(kernel: Kernel, node: Node, command: str, env: dict[str, str]) -> str:
    """What the guest runs after switching root: modules, network, rxe0, then ``command``; power off."""
    if node.netdev == "veth0":
        net = (
            "ip link add veth0 type veth peer name veth1\n"
            f"ip addr add {node.addr}/24 dev veth0\n"
            "ip link set veth1 up; ip link set veth0 up\n"
        )
    else:
        net = f"ip addr add {node.addr}/24 dev {node.netdev}\nip link set {node.netdev} up\n"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    checkout = ""
    if str(REPO).startswith("/tmp/"):
        checkout = f"mkdir -p {shlex.quote(str(REPO))}; mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 checkout {shlex.quote(str(REPO))}\n"
    return f"""# generated by tests/rdmavm/vm.py
mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run
mkdir -p /lib/modules; mount --bind {shlex.quote(str(kernel.root / "lib" / "modules"))} /lib/modules
{checkout}for m in {" ".join(GUEST_MODULES)}; do modprobe $m || echo "rdmavm: modprobe $m failed"; done
ip link set lo up
{net}rdma link add rxe0 type rxe netdev {node.netdev} || echo "rdmavm: rdma link add rxe0 failed"
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export IBDIAG_RDMAVM_GUEST=1 IBDIAG_RDMAVM_OUT=/mnt/out IBDIAG_RDMAVM_ADDR={node.addr} IBDIAG_RDMAVM_PEER={node.peer or ""}
export IBDIAG_RDMAVM_NETDEV={node.netdev} IBDIAG_TEST_STRICT=1 PYTHONDONTWRITEBYTECODE=1
{exports}cd {shlex.quote(str(REPO))}
/bin/sh -c {shlex.quote(command)} >/mnt/out/guest.log 2>&1
echo $? >/mnt/out/rc
sync; echo o >/proc/sysrq-trigger; sleep 60
"""


@dataclass
class GuestRun:
    out: Path
    rc: int | None
    """The command's exit status; None when the guest never got to write one (boot failure, timeout)."""
    console: str
    log: str = field(default="")

    def tail(self, n: int = 40) -> str:
        lines = (self.log or self.console).splitlines()
        return "\n".join(lines[-n:])


@dataclass
class Guest:
    """A started guest (a qemu process); :meth:`wait` returns its :class:`GuestRun`."""

    proc: subprocess.Popen[bytes]
    out: Path
    deadline: float

    def wait(self) -> GuestRun:
        try:
            self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
        return collect(self.out)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


def collect(out: Path) -> GuestRun:
    rc_text = (out / "rc").read_text().strip() if (out / "rc").is_file() else ""
    console = (
        (out / "console.log").read_text(errors="replace") if (out / "console.log").is_file() else ""
    )
    log = (out / "guest.log").read_text(errors="replace") if (out / "guest.log").is_file() else ""
    return GuestRun(out, int(rc_text) if rc_text.isdigit() else None, console, log)


def prepare() -> tuple[Kernel, Path]:
    """Host tools, kernel and initramfs (installing/downloading what is missing); Unavailable if not possible."""
    ensure_host_packages()
    kernel = fetch_kernel()
    return kernel, build_initrd(kernel)


def start(
    command: str,
    out: Path,
    *,
    node: Node | None = None,
    mem_mib: int = 2048,
    timeout_s: float = 240,
    env: dict[str, str] | None = None,
) -> Guest:
    """Boot a guest that runs ``command`` (sh, in the checkout) and powers off; returns at once."""
    kernel, initrd = prepare()
    node = node or Node.single()
    out.mkdir(parents=True, exist_ok=True)
    for stale in (
        "rc",
        "guest.log",
        "console.log",
        "junit.xml",
        "pair-results.json",
    ):  # nothing of a previous run passes for this one
        (out / stale).unlink(missing_ok=True)
    (out / "stage.sh").write_text(stage_script(kernel, node, command, env or {}))
    args = [
        "qemu-system-x86_64", "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", str(mem_mib),
        "-nographic", "-no-reboot", "-kernel", str(kernel.vmlinuz), "-initrd", str(initrd),
        "-append", "console=ttyS0 panic=-1 loglevel=3 edd=off",
        "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs", f"local,path={out},mount_tag=rundir,security_model=none",
    ]  # fmt: skip
    if str(REPO).startswith("/tmp/"):
        args += ["-virtfs", f"local,path={REPO},mount_tag=checkout,security_model=none,readonly=on"]
    args += list(node.qemu_net)
    console = open(out / "console.log", "wb")  # qemu writes it until it exits
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        console.close()
    return Guest(proc, out, time.monotonic() + timeout_s)


def run(command: str, out: Path, **kw) -> GuestRun:
    """Boot, run ``command``, power off; the result (see :func:`start`)."""
    return start(command, out, **kw).wait()
