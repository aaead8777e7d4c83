"""Regenerate fixtures/fabric/: saved fabrics (`ibdiag fabric --save`) of simulated subnets.

Needs the simulator (apt-get install ibsim-utils libumad2sim0 opensm infiniband-diags). Each fixture is
what infiniband-diags printed on a project-generated topology with the planted faults its name says:

* ``rail-fat-tree-faulty``: 8 hosts x 4 rails, 4 leaves, 2 spines (1:1); 57 symbol errors on the leaf
  side of gpu03 mlx5_2's cable (the host side clean) and the third uplink of leaf-r3-1 trained at 1x.

Run from the repository root: ``python -m scripts.make_fabric_fixture``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"


def main() -> int:
    t = rail_fat_tree()
    leaf, lport, _spine, _sport = t.isl("leaf-r3-1", 2)
    t.set_link(leaf.desc, lport, "1xHDR")
    dest = OUT / "rail-fat-tree-faulty"
    with tempfile.TemporaryDirectory() as tmp, SimFabric(t.text(), Path(tmp) / "sim") as f:
        sw, port = t.host_cable("gpu03", 2)
        f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.SymbolErrorCounter=57')
        saved = Path(tmp) / "dump"
        subprocess.run(
            [sys.executable, "-m", "ibdiag", "fabric", "--save", str(saved), "-o", "line"],
            env=f.env(),
            check=False,
        )
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(saved, dest)
    for p in dest.iterdir():
        # The simulator's preload library says where it attached, on every tool's stderr: not the fabric's.
        if p.suffix == ".err":
            p.write_text(
                "".join(ln for ln in p.read_text().splitlines(True) if "sim_connect" not in ln)
            )
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
