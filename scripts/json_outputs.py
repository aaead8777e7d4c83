"""Capture the JSON output of every command on the bundled fixtures, to compare two checkouts.

    python scripts/json_outputs.py OUTDIR            # run this checkout's ibdiag, one file a command line
    python scripts/json_outputs.py --compare A B     # exit 1 and name each file that differs
    python scripts/json_outputs.py --against REV OUT # both at once: REV's code (a git worktree) and this one's

The envelope's ``generated_at`` (and a few wall-clock fields) are the only things normalised: every
other byte of each document, and each command's exit status, must be the same. Used to show that a
restructuring changed no output (CONTRIBUTING.md, "Moving code").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYSFS = ROOT / "fixtures" / "sysfs"
LOGS = ROOT / "fixtures" / "logs"
VERDICT_ARGS = ["--params", "8e9", "--dtype", "bf16", "--ranks", "512", "--compute-s", "2"]
# Values that are the wall clock or a temporary path, not the code's behaviour.
NORMALISE = [
    (re.compile(r'"(generated_at|sampled_at|started_at|finished_at)": "[^"]*"'), r'"\1": "T"'),
    (re.compile(r'"(sampled_at_epoch_s)": [0-9.e+-]+'), r'"\1": 0'),
    (re.compile(r"/tmp/[A-Za-z0-9_.-]+"), "/tmp/X"),
]


def command_lines(work: Path) -> dict[str, list[str]]:
    """Name -> argv (after ``ibdiag``): every command that runs on bundled files alone."""
    lines: dict[str, list[str]] = {}
    for tree in sorted(p for p in SYSFS.iterdir() if p.is_dir()):
        lines[f"topo-{tree.name}"] = ["topo", "--root", str(tree), "-o", "json"]
        lines[f"topo-strict-{tree.name}"] = [
            "topo",
            "--root",
            str(tree),
            "--strict",
            "--expect-rate",
            "400",
            "-o",
            "json",
        ]
        lines[f"counters-{tree.name}"] = ["counters", "--root", str(tree), "-o", "json"]
        lines[f"verdict-{tree.name}"] = [
            "verdict",
            *VERDICT_ARGS,
            "--busbw",
            "360",
            "--root",
            str(tree),
            "-o",
            "json",
        ]
    for log in sorted(LOGS.iterdir()):
        if log.suffix in (".log", ".json"):
            lines[f"import-{log.name}"] = ["bench", "import", str(log), "-o", "json"]
    lines["verdict-net-bound"] = [
        "verdict",
        *VERDICT_ARGS[:6],
        "--ranks-per-node",
        "1",
        "--link-gbps",
        "400",
        "--busbw",
        "5",
        "--compute-s",
        "0.2",
        "-o",
        "json",
    ]
    lines["verdict-nccl-log"] = [
        "verdict",
        *VERDICT_ARGS,
        "--nccl-tests",
        str(LOGS / "nccl-tests-2025_all_reduce_perf.log"),
        "--root",
        str(SYSFS / "dgx-h100"),
        "-o",
        "json",
    ]
    fabric = ROOT / "fixtures" / "fabric"
    for dump in sorted(fabric.iterdir()):
        lines[f"fabric-{dump.name}"] = ["fabric", "--from", str(dump), "-o", "json"]
    lines["verdict-placement"] = [
        "verdict",
        *VERDICT_ARGS[:4],
        "--ranks",
        "16",
        "--ranks-per-node",
        "1",
        "--rails-per-node",
        "2",
        "--link-gbps",
        "200",
        "--busbw",
        "24",
        "--compute-s",
        "2",
        "--fabric",
        str(fabric / "two-to-one.net"),
        "--nodes",
        "gpu[01-16]",
        "--rank-order",
        "gpu01,gpu09,gpu02,gpu10,gpu03,gpu11,gpu04,gpu12,gpu05,gpu13,gpu06,gpu14,gpu07,gpu15,gpu08,gpu16",
        "-o",
        "json",
    ]
    lines["sweep-plan"] = [
        "sweep",
        "--plan",
        "--nodes",
        "64",
        "--pattern",
        "ring",
        "--rails",
        "mlx5_0,mlx5_1",
        "-o",
        "json",
    ]
    lines["sweep-plan-random"] = [
        "sweep",
        "--plan",
        "--nodes",
        "1024",
        "--pattern",
        "random",
        "--rounds",
        "4",
        "-o",
        "json",
    ]
    return lines


def run_all(out: Path, code: Path = ROOT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    lines = command_lines(work)
    for name, argv in lines.items():
        res = subprocess.run(
            [sys.executable, "-m", "ibdiag", *argv],
            capture_output=True,
            text=True,
            cwd=code,
            timeout=120,
        )
        (out / f"{name}.json").write_text(
            f"exit {res.returncode}\n{normalise(res.stdout.replace(str(work), 'WORK'))}\n--- stderr\n{normalise(res.stderr.replace(str(work), 'WORK'))}"
        )
    # report over what the commands above wrote: the fleet view of many nodes' documents
    inputs = sorted(str(p) for p in out.glob("topo-*.json")) + sorted(
        str(p) for p in out.glob("counters-*.json")
    )
    for p in inputs:  # drop the "exit N" line so report reads plain JSON
        (work / Path(p).name).write_text(
            Path(p).read_text().split("\n", 1)[1].split("\n--- stderr\n")[0]
        )
    res = subprocess.run(
        [sys.executable, "-m", "ibdiag", "report", str(work), "-o", "json"],
        capture_output=True,
        text=True,
        cwd=code,
        timeout=120,
    )
    (out / "report-fleet.json").write_text(
        f"exit {res.returncode}\n{normalise(res.stdout.replace(str(work), 'WORK'))}\n--- stderr\n{normalise(res.stderr.replace(str(work), 'WORK'))}"
    )


def normalise(text: str) -> str:
    text = text.replace(str(ROOT), "CHECKOUT")
    for pattern, repl in NORMALISE:
        text = pattern.sub(repl, text)
    return text


def compare(a: Path, b: Path) -> int:
    names_a = {p.name for p in a.glob("*.json")}
    names_b = {p.name for p in b.glob("*.json")}
    bad = sorted(names_a ^ names_b)
    bad += sorted(n for n in names_a & names_b if (a / n).read_bytes() != (b / n).read_bytes())
    for n in bad:
        print(f"differs: {n}")
    print(f"{len(names_a & names_b)} documents compared, {len(bad)} differ")
    return 1 if bad else 0


def against(rev: str, out: Path) -> int:
    """Run REV's code (checked out in a temporary worktree) and this checkout's on this checkout's
    fixtures, then compare: the code is the only thing that differs."""
    tree = Path(tempfile.mkdtemp(prefix="ibdiag-rev-")) / "tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=ROOT, check=True
    )
    try:
        run_all(out / "old", code=tree)
        run_all(out / "new")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    return compare(out / "old", out / "new")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--against", metavar="REV")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.dirs)
    if args.against:
        return against(args.against, args.dirs[0])
    run_all(args.dirs[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
