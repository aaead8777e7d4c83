"""perftest's command line for one size and kind, its version, how long a run may take.

ibdiag's options map onto perftest's (:func:`perftest_argv`); the request was checked against
perftest's own bounds when it was built (:func:`ibdiag.bench.p2p.params.perftest_problem`).
"""

from __future__ import annotations

import re

from ibdiag.bench.p2p.params import RunRequest

#: ``-D`` takes whole seconds ("Duration period argument 1.5 should be int"); perftest measures
#: within a margin of 2 s on each side of it (``-f``, default 2).
DURATION_MARGIN_S = 2


INSTALL_HINT = "install perftest on both hosts (apt install perftest, dnf install perftest, or build github.com/linux-rdma/perftest)"


#: Slowest rate and longest per-message time assumed when bounding an --iters run (bytes/s, s).
SLOWEST_BPS = 50e6


SLOWEST_MESSAGE_S = 1e-3


_VERSION = re.compile(r"Version:\s*([0-9][0-9A-Za-z.\-]*)")


def binary(verb: str, kind: str) -> str:
    """``ib_write_bw``, ``ib_read_lat``, ``ib_send_bw`` ..."""
    return f"ib_{verb}_{kind}"


def perftest_argv(
    program: str,
    req: RunRequest,
    kind: str,
    size: int,
    *,
    device: str,
    ib_port: int,
    gid_index: int | None,
    tcp_port: int,
    server: str | None = None,
) -> list[str]:
    """The perftest command for one size and kind; ``server`` is None on the server side.

    ibdiag option -> perftest: --sizes -> ``-s`` (one run per size), --iters -> ``-n``,
    --duration -> ``-D``, --qps -> ``-q``, --bidir -> ``-b``, --tx-depth -> ``-t`` (bandwidth),
    --inline -> ``-I``, --tclass -> ``--tclass``, --sl -> ``-S``, --device -> ``-d``,
    --ib-port -> ``-i``, --gid-index -> ``-x``; ``-F`` always (no failure on a CPU frequency
    warning, as on VMs); ``-p`` is perftest's own TCP exchange port.
    """
    argv = [program, "-d", device, "-i", str(ib_port)]
    if gid_index is not None:
        argv += ["-x", str(gid_index)]
    argv += ["-s", str(size), "-p", str(tcp_port), "-F"]
    if req.iters is not None:
        argv += ["-n", str(req.iters)]
    elif req.duration_s is not None:
        argv += ["-D", str(int(req.duration_s))]
    if kind == "bw":
        argv += ["-t", str(req.tx_depth)]
        if req.qps > 1:
            argv += ["-q", str(req.qps)]
        if req.bidir:
            argv.append("-b")
    if req.inline is not None and req.verb != "read":
        argv += ["-I", str(req.inline)]
    if req.tclass:
        argv.append(f"--tclass={req.tclass}")
    if req.sl:
        argv += ["-S", str(req.sl)]
    if server is not None:
        argv.append(server)
    return argv


def run_limit_s(req: RunRequest, kind: str, size: int, timeout_s: float) -> float:
    """Longest one perftest run may take before it is killed (seconds): its expected length plus ``timeout_s``.

    Without --iters/--duration perftest runs its defaults (5000 bandwidth, 1000 latency messages).
    """
    if req.duration_s is not None:
        expected = req.duration_s + 2 * DURATION_MARGIN_S
    else:
        n = req.iters if req.iters is not None else (5000 if kind == "bw" else 1000)
        per = size / SLOWEST_BPS + SLOWEST_MESSAGE_S
        expected = n * per * (2 if kind == "lat" else 1) * (req.qps if kind == "bw" else 1)
    return expected + timeout_s + 5.0


def parse_version(text: str) -> str | None:
    """``Version: 6.06`` (perftest ``--version``) -> ``6.06``."""
    m = _VERSION.search(text)
    return m.group(1)[:32] if m else None
