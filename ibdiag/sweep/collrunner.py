"""``ibdiag sweep --test collective``: a 2-rank all_reduce per pair, like the peers' pairwise NCCL tests.

Both nodes of a pair build a 2-rank gloo process group of their own over the job's rendezvous store
(key prefix ``coll/<round>/<a>-<b>``, so the pairs of a round never meet), on the node's own address,
and time ``all_reduce`` the way ``bench collective`` does with gloo (nccl-tests' method: warm-up, then
calls timed together on the host clock; each call returns when it is done), in three blocks of which
the fastest counts (:data:`BLOCKS`). The iteration count is agreed by the pair (the larger of the two
proposals from the warm-up), so neither waits for a call the other never makes. Bus bandwidth is nccl-tests': algbw x 2(n-1)/n, which is algbw itself for n = 2.

gloo runs in host memory over TCP between the nodes' addresses: it measures the host network path,
not the RDMA rails. NCCL per pair (the GPUs' path) is not implemented.
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Any

from ibdiag.collectives import OPS
from ibdiag.runtime.torchdist import first_line, import_dist
from ibdiag.sweep.runner import PairResult, PairSpec
from ibdiag.sweep.schedule import Phase

#: Warm-up calls before the timed ones (nccl-tests' default ``-w 5`` is for GPUs; two settle gloo's connections).
WARMUP_CALLS = 2
#: Most timed calls one pair test makes (a tiny message on a fast path).
MAX_CALLS = 100_000
#: The timed calls run in this many equal blocks and the fastest block counts: a call waits for both
#: processes, so a moment either is descheduled idles the link (a busy host, not the network); a slow
#: link or node is slow in every block. Like perftest's BW peak beside its BW average.
BLOCKS = 3


def pair_allreduce(
    store: Any,
    address: str,
    round_index: int,
    phase: Phase,
    a: int,
    b: int,
    me: int,
    spec: PairSpec,
) -> PairResult | None:
    """Run this node's side of the pair's all_reduce; the measuring end (``b``) returns the result,
    the serving end (``a``) None. Never raises for a failed or silent peer: the error goes in the result."""
    try:
        busbw = _measure(store, address, f"coll/{round_index}/{a}-{b}", 0 if me == a else 1, spec)
    except (
        Exception
    ) as e:  # gloo and the store raise RuntimeError subclasses; any is this pair's failure
        if me != b:
            return None
        text = "".join(c if c.isprintable() else " " for c in first_line(e))
        return PairResult(
            round_index, phase, 0, a, b, None, error=f"all_reduce with rank {a}: {text}"[:500]
        )
    return PairResult(round_index, phase, 0, a, b, busbw) if me == b else None


def _measure(store: Any, address: str, prefix: str, pair_rank: int, spec: PairSpec) -> float:
    torch, dist = import_dist()
    gloo = dist.ProcessGroupGloo
    opts = (
        gloo._Options()
    )  # the only way to give gloo a device on a chosen address (GLOO_SOCKET_IFNAME is per process)
    opts._devices = [gloo.create_device(hostname=address)]
    opts._timeout = datetime.timedelta(seconds=spec.timeout_s)
    pg = gloo(dist.PrefixStore(prefix, store), pair_rank, 2, opts)
    try:
        buf = torch.ones(
            max(1, spec.bytes // 4), dtype=torch.float32
        )  # ones: no denormals to slow the sum
        t0 = time.perf_counter()
        for _ in range(WARMUP_CALLS):
            pg.allreduce([buf]).wait()
        per_call = (time.perf_counter() - t0) / WARMUP_CALLS
        proposal = torch.tensor(
            [min(MAX_CALLS, max(1, math.ceil(spec.duration_s / max(per_call, 1e-6))))],
            dtype=torch.int64,
        )
        agree = dist.AllreduceOptions()
        agree.reduceOp = dist.ReduceOp.MAX
        pg.allreduce([proposal], agree).wait()
        calls = max(1, -(-int(proposal.item()) // BLOCKS))
        best = math.inf
        for _ in range(BLOCKS):
            t0 = time.perf_counter()
            for _ in range(calls):
                pg.allreduce([buf]).wait()
            best = min(best, (time.perf_counter() - t0) / calls)
    finally:
        del pg
    algbw_gbs = float(buf.numel()) * 4 / best / 1e9
    return algbw_gbs * OPS["all_reduce"].busbw_factor(2)
