"""``ibdiag fabric --from`` on the project's generated fabrics, every output format, to compare two checkouts.

    python scripts/fabric_outputs.py dumps DIR [--live]      # write the dumps (generated shapes; --live:
                                                             # also what the tools print in the simulator)
    python scripts/fabric_outputs.py run DIR OUT [--code CHECKOUT]   # judge each dump, one file a case
    python scripts/fabric_outputs.py --against REV DIR OUT   # REV's code and this checkout's on DIR's dumps

``scripts/json_outputs.py`` covers the bundled fixtures; this covers the shapes of
``tests/support/fabric_topology.py`` and ``tests/support/fabric_shapes.py`` (the real-shape generators
of tests/fabric/test_real_shapes.py: directors in both spellings, SHARP, bring-up trees with loops,
mixed speeds, a campus with its node-name maps, a management pod, both rail spellings, a ring, two
nodes of one GUID, the Selene-size fabric, dumps as people save them, malformed ones) and, with
``--live``, dumps saved from the simulator (port states, counters, subnet managers, pastes of one tool).
Each case is written as ``exit N``, stdout, ``--- stderr``, stderr, with ``generated_at`` and temporary
paths normalised (json_outputs.py's rules): every other byte must be the same. The dumps are written
once and read by both checkouts, so only the code differs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.json_outputs import compare, normalise  # noqa: E402

FORMATS = ("json", "csv", "prom", "table", "line", "junit")
#: Wall-clock values of the other formats (JUnit's times, the run's Prometheus timestamp).
CLOCKS = [
    (re.compile(r'\b(time|timestamp)="[^"]*"'), r'\1="T"'),
    (re.compile(r"^(ibdiag_last_run_timestamp_seconds\{[^}]*\}) \S+$", re.M), r"\1 T"),
]


def unclock(text: str) -> str:
    for pattern, repl in CLOCKS:
        text = pattern.sub(repl, text)
    return text


def shapes() -> dict[str, str]:
    """Name -> ibnetdiscover text of every generated shape (the generators of this checkout)."""
    from tests.support import fabric_shapes as fs
    from tests.support.fabric_topology import (
        rail_fat_tree,
        remove_link,
        single_switch,
        three_tier,
    )

    out: dict[str, str] = {}
    out["rail-default"] = rail_fat_tree().text()
    out["rail-8x2"] = rail_fat_tree(hosts=8, rails=2).text()
    out["rail-16x4x2"] = rail_fat_tree(hosts=16, rails=4, leaves_per_rail=2).text()
    out["rail-2to1"] = rail_fat_tree(hosts=8, rails=2, oversubscription=2).text()
    out["rail-ports20"] = rail_fat_tree(hosts=8, rails=4, switch_ports=20).text()
    out["rail-bench-4096"] = rail_fat_tree(hosts=128, rails=8, leaves_per_rail=4, spines=16).text()
    out["rail-edr"] = rail_fat_tree(hosts=8, rails=2, speed="EDR").text()
    t = rail_fat_tree(hosts=8, rails=2, leaves_per_rail=2)
    for leaf in ("leaf-r0-1", "leaf-r1-1"):
        remove_link(t, leaf, 7)
        remove_link(t, leaf, 8)
    out["rail-weak-leaves"] = t.text()
    t = rail_fat_tree(hosts=8, rails=4)
    t.set_link("leaf-r3-1", 11, "1xHDR")
    out["rail-1x-isl"] = t.text()
    out["single-switch"] = single_switch().text()
    out["three-tier"] = three_tier().text()
    t = three_tier(pods=4)
    for pod in (1, 3):
        for spine in (1, 2):
            remove_link(t, f"spine-p{pod}-{spine}", 7)
            remove_link(t, f"spine-p{pod}-{spine}", 8)
    out["three-tier-weak-pods"] = t.text()
    d = fs.director_fabric()
    out["director"] = d.text()
    out["director-ibdiagnet"] = d.text("ibdiagnet")
    t = rail_fat_tree()
    fs.add_sharp(t)
    out["sharp"] = t.text()
    out["bringup"] = fs.bringup_tree().text()
    out["mixed-speeds"] = fs.mixed_speeds().text()
    out["mixed-speeds-clean"] = fs.mixed_speeds(degraded=False).text()
    campus, _quoted, _ids = fs.campus()
    out["campus"] = campus.text()
    out["management-pod"] = fs.management_pod().text()
    out["two-spellings"] = fs.two_spellings().text()
    out["selene"] = fs.selene_size().text()
    base = rail_fat_tree(hosts=4, rails=2).text()
    out["with-prompt"] = fs.with_prompt(base)
    out["with-stderr-line"] = fs.with_stderr_line(base)
    out["putty-log"] = fs.putty_log(base)
    out["ring"] = _ring(fs)
    t = rail_fat_tree(hosts=4, rails=2)
    a, b = t.switch("leaf-r0-1"), t.switch("leaf-r1-1")
    out["duplicate-guid"] = t.text().replace(
        f"switchguid=0x{b.guid:x}({b.guid:x})", f"switchguid=0x{a.guid:x}({a.guid:x})"
    )
    out["bad-lid"] = base.replace("lid 0 4xHDR", "lid 12345678901234567890 4xHDR", 1)
    out["bad-guid"] = base.replace(
        '"H-0002c90300000100"[1](2c90300000101)', '"H-0002c90300000100"[1](2c9030000010100ab)', 1
    )
    for extra in getattr(fs, "SCALE_SHAPES", {}).items():  # the scale generators, where they exist
        name, make = extra
        out[name] = make()
    return out


def _ring(fs: object) -> str:
    b = fs.Builder()  # type: ignore[attr-defined]
    sw = [b.switch(f"MF0;IB_switch_{k}:MSB7800/U1", nports=37, devid=0xCF08) for k in (1, 2, 3, 4)]
    for k in range(4):
        b.isl(sw[k], sw[(k + 1) % 4], "4xEDR")
    for k, s in enumerate(sw):
        b.host_link(s, b.ca(f"lab{k + 1} mlx5_0", f"lab{k + 1}", devid=0x1017), "4xEDR")
    t = b.topology()
    fs.add_sharp(t)  # type: ignore[attr-defined]
    return str(t.text())


def write_dumps(out: Path, live: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in shapes().items():
        (out / f"{name}.net").write_text(text)
    from tests.support.fabric_shapes import campus

    _t, quoted, ids = campus()
    (out / "campus.map").write_text(quoted)
    (out / "campus-ids.map").write_text(ids)
    if live:
        _live_dumps(out)


def _live_dumps(out: Path) -> None:
    """What the tools print in the simulator, saved by ``ibdiag fabric --save`` (and pastes of one tool)."""
    from tests.support.fabric_topology import rail_fat_tree
    from tests.support.ibsim import SimFabric

    def save(name: str, topo_text: str, plant: Callable[[SimFabric], None] | None = None) -> None:
        with (
            tempfile.TemporaryDirectory() as tmp,
            SimFabric(topo_text, Path(tmp) / "sim", timeout_s=60) as sim,
        ):
            if plant is not None:
                plant(sim)
                sim.settle(1.0)
            env = {**sim.env(), "PYTHONPATH": str(ROOT)}
            subprocess.run(
                [sys.executable, "-m", "ibdiag", "fabric", "--save", str(out / name), "-o", "json"],
                env=env,
                capture_output=True,
                check=False,
                timeout=300,
            )
            for tool, argv in (
                ("iblinkinfo", ["iblinkinfo", "-l"]),
                ("ibqueryerrors", ["ibqueryerrors", "--data", "--details"]),
                ("sminfo", ["sminfo"]),
            ):
                done = sim.run(argv, timeout=120)
                (out / f"{name}-paste-{tool}.txt").write_text(done.stdout)

    small = rail_fat_tree(hosts=8, rails=4)
    save("live-small", small.text())

    def errors(sim: SimFabric) -> None:
        leaf = small.switch("leaf-r2-1")
        sim.console(
            f'PerformanceSet "{leaf.node_id}"[3] PortCounters.SymbolErrorCounter=57',
            f'PerformanceSet "{leaf.node_id}"[9] PortCounters.PortXmitWait=900000',
            f'PerformanceSet "{leaf.node_id}"[9] PortCountersExtended.PortXmitData=123456789',
        )

    save("live-small-errors", small.text(), errors)
    big = rail_fat_tree(hosts=128, rails=8, leaves_per_rail=4, spines=16)
    save("live-4096", big.text())


def cases(dumps: Path) -> dict[str, list[str]]:
    """Case name -> argv after ``ibdiag``."""
    out: dict[str, list[str]] = {}
    for d in sorted(dumps.iterdir()):
        if d.suffix in (".net", ".txt") or d.is_dir():
            for fmt in FORMATS:
                out[f"{d.stem}.{fmt}"] = ["fabric", "--from", str(d), "-o", fmt]
    if (dumps / "campus.net").exists():
        for m in ("campus.map", "campus-ids.map"):
            out[f"campus-namemap-{m}.json"] = [
                "fabric",
                "--from",
                str(dumps / "campus.net"),
                "--node-name-map",
                str(dumps / m),
                "-o",
                "json",
            ]
    for a, b in (("rail-8x2", "rail-weak-leaves"), ("live-small", "live-small-errors")):
        if (dumps / f"{a}.net").exists() or (dumps / a).is_dir():
            pa = dumps / a if (dumps / a).is_dir() else dumps / f"{a}.net"
            pb = dumps / b if (dumps / b).is_dir() else dumps / f"{b}.net"
            if pb.exists():
                out[f"since-{a}-{b}.json"] = [
                    "fabric",
                    "--from",
                    str(pb),
                    "--since",
                    str(pa),
                    "-o",
                    "json",
                ]
                out[f"expect-{a}-{b}.json"] = [
                    "fabric",
                    "--from",
                    str(pb),
                    "--expect",
                    str(pa),
                    "-o",
                    "json",
                ]
    return out


def run_all(dumps: Path, out: Path, code: Path = ROOT, jobs: int = 2) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "160", "PYTHONPATH": str(code)}

    def one(item: tuple[str, list[str]]) -> None:
        name, argv = item
        res = subprocess.run(
            [sys.executable, "-m", "ibdiag", *argv],
            capture_output=True,
            text=True,
            cwd=code,
            env=env,
            timeout=600,
        )
        text = f"exit {res.returncode}\n{res.stdout}\n--- stderr\n{res.stderr}"
        (out / f"{name}.json").write_text(unclock(normalise(text.replace(str(dumps), "DUMPS"))))

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, cases(dumps).items()))


def against(rev: str, dumps: Path, out: Path) -> int:
    tree = Path(tempfile.mkdtemp(prefix="ibdiag-rev-")) / "tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=ROOT, check=True
    )
    try:
        run_all(dumps, out / "old", code=tree)
        run_all(dumps, out / "new")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    return compare(out / "old", out / "new")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("args", nargs="+")
    ap.add_argument("--live", action="store_true", help="dumps: also save dumps from the simulator")
    ap.add_argument("--code", type=Path, default=ROOT, help="run: the checkout whose ibdiag runs")
    ap.add_argument("--against", metavar="REV")
    ap.add_argument("--jobs", type=int, default=2)
    ns = ap.parse_args()
    if ns.against:
        return against(ns.against, Path(ns.args[0]), Path(ns.args[1]))
    what, *rest = ns.args
    if what == "dumps":
        write_dumps(Path(rest[0]), ns.live)
    elif what == "run":
        run_all(Path(rest[0]), Path(rest[1]), ns.code.resolve(), ns.jobs)
    elif what == "compare":
        for d in (
            Path(rest[0]),
            Path(rest[1]),
        ):  # outputs written before the clocks were normalised
            for f in d.glob("*.json"):
                f.write_text(unclock(f.read_text()))
        return compare(Path(rest[0]), Path(rest[1]))
    else:
        ap.error(f"unknown step {what!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
