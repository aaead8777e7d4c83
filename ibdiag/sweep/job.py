"""What every rank of a sweep is asked to do, and how long rank 0 waits for a round."""

from __future__ import annotations

from dataclasses import dataclass, field

from ibdiag.node.sysfs import SysfsRoot
from ibdiag.sweep.analysis import SweepConfig
from ibdiag.sweep.layout import FabricDescription
from ibdiag.sweep.runner import PairSpec
from ibdiag.sweep.schedule import Pattern

__all__ = ["TEST_SETUP_S", "SweepJob", "round_limit_s"]

#: Seconds a pair test may take beyond its measured time: connection, handshake, warm-up.
TEST_SETUP_S = 2.0


@dataclass(frozen=True)
class SweepJob:
    """What every rank of a sweep is asked to do (the same on every rank: the command line)."""

    pattern: Pattern = Pattern.RING
    rounds: int | None = None
    seed: int = 0
    second_pass: bool = True
    spec: PairSpec = PairSpec()
    config: SweepConfig = SweepConfig()
    adapters: tuple[str, ...] | None = None
    """``--rails``: adapters in rail order; None: from topo."""
    start_timeout_s: float = 60.0
    """How long rank 0 waits for every node to start and publish itself."""
    sysfs: SysfsRoot = field(default_factory=SysfsRoot)
    """The tree this rank reads (rails, line rates, devices). Never sent: each rank builds its own job."""
    perftest_path: str | None = None
    """PATH for perftest's binaries (``--engine perftest``/``auto``); None: this process's PATH."""
    fabric: FabricDescription | None = None
    """Where the nodes sit and how the fabric routes (``--fabric FILE``, read on rank 0 only: the
    other ranks never plan). With it rank 0 orders the pattern by leaf and packs each round so that
    no two tests claim one link; without it, every test beside others is shared and a slow one is
    re-tested alone."""


def round_limit_s(spec: PairSpec) -> float:
    """How long rank 0 waits for a round's reports: one test's time (measured time per kind, plus set-up)
    plus ``--timeout``, the longest a peer may be silent."""
    kinds = 2 if spec.mode == "both" else 1
    silences = (
        2 if spec.test == "collective" else 1
    )  # gloo: connecting, then each call, may wait --timeout
    return kinds * (spec.duration_s + TEST_SETUP_S) + silences * spec.timeout_s
