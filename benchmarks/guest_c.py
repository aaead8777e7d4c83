"""What the guest benchmarks that compare ibdiag with a small C program share: building the C side
in the Soft-RoCE guest, and booting the guest from the host and reading back the JSON it wrote.

Used by ``rdma_post_cost.py`` and ``rdma_lat_sides.py``; both run themselves again in the guest
with ``--in-guest``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_c(source: str, workdir: Path, name: str) -> Path:
    """Compile ``source`` against libibverbs in the guest (``cc -O2``); the executable's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("no C compiler in the guest")
    src, exe = workdir / f"{name}.c", workdir / name
    src.write_text(source)
    subprocess.run(
        [cc, "-O2", "-o", str(exe), str(src), "-libverbs"], check=True, capture_output=True
    )
    return exe


def run_in_guest(script: str, guest_args: str, result_name: str) -> dict | int:
    """Boot the guest, run ``benchmarks/SCRIPT --in-guest GUEST_ARGS`` there and return the JSON it
    left in ``$IBDIAG_RDMAVM_OUT/RESULT_NAME``; an exit status instead when there is none: 3 where no
    guest can boot (noted in ``make bench``'s summary), 1 when the guest run failed. Installs
    Debian's ``libibverbs-dev`` (the headers the C side needs) when it is missing and this is root."""
    sys.path.insert(0, str(REPO))
    from ratios import append_summary

    from tests.rdmavm import vm

    if (
        shutil.which("cc")
        and not Path("/usr/include/infiniband/verbs.h").exists()
        and os.geteuid() == 0
    ):
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "libibverbs-dev"],
            check=False,
            capture_output=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    name = script.removesuffix(".py")
    out = REPO / "build" / "rdmavm" / name
    try:
        run = vm.run(
            f"{sys.executable} benchmarks/{script} --in-guest {guest_args}", out, timeout_s=900
        )
    except vm.Unavailable as e:
        print(f"{name}: cannot boot the RDMA test bed: {e}", file=sys.stderr)
        append_summary(f"{name}: not measured (cannot boot the RDMA test bed: {e})")
        return 3
    result = out / result_name
    if run.rc != 0 or not result.is_file():
        print(f"the guest run failed (exit {run.rc}):\n{run.tail()}", file=sys.stderr)
        return 1
    return json.loads(result.read_text())
