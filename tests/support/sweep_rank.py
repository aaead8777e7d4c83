"""One rank of a sweep run through the library entry point (``ibdiag.sweep.distributed.run_distributed``),
for tests that need what ``ibdiag sweep``'s command line does not offer yet: a fabric description
(``--fabric FILE``, read on rank 0 only, as the runtime expects).

    python -m tests.support.sweep_rank --fabric PLAN --save OUT [--pattern ring] [--rounds K] [--seed N]
        [--sizes BYTES] [--duration S] [--timeout S] [--config TOML]

The rank, world size and rendezvous come from the launcher's environment (a Slurm-style job:
tests/support/sweep.py ``slurm_env``), as for ``ibdiag sweep``. Rank 0 writes the ``ibdiag.sweep/1``
document (envelope, findings and all) to ``--save``; every rank exits 0 when it did its part.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
from pathlib import Path

from ibdiag import __version__
from ibdiag.config import load_config
from ibdiag.findings.model import Report, RunMeta
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.output.jsonout import render_json
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import detect_launch
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.config import SweepSettingsFile
from ibdiag.sweep.distributed import SweepJob, run_distributed
from ibdiag.sweep.layoutread import load_description
from ibdiag.sweep.runner import PairSpec
from ibdiag.sweep.schedule import Pattern


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="sweep_rank")
    ap.add_argument("--fabric", type=Path)
    ap.add_argument("--save", type=Path, required=True)
    ap.add_argument("--pattern", default="ring")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", type=int, default=2**20)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--config", type=Path)
    args = ap.parse_args(argv)
    launch = detect_launch(os.environ)
    if launch is None:
        print("sweep_rank: no launcher environment", file=sys.stderr)
        return 2
    file = load_config(args.config).section("sweep", SweepSettingsFile)
    job = SweepJob(
        Pattern(args.pattern),
        args.rounds,
        args.seed,
        True,
        PairSpec(
            transport="tcp",
            bytes=args.sizes,
            duration_s=args.duration,
            timeout_s=args.timeout,
        ),
        file.thresholds(),
        None,
        file.start_timeout_s,
        sysfs=SysfsRoot("/"),
        fabric=load_description(args.fabric) if args.fabric and launch.rank == 0 else None,
    )
    result = run_distributed(job, launch, hooks=TestHooks.from_env(os.environ))
    if result is not None:
        report = Report("sweep", result.to_json(), tuple(sweep_findings(result)))
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = RunMeta(host=socket.gethostname(), version=__version__, generated_at=now)
        args.save.write_text(render_json(report, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
