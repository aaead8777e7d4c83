"""A routed two-tier fabric of network namespaces: hosts, leaf routers and spine routers with real ECMP.

Each host is a namespace with one veth (``eth0``) to its leaf; a leaf is a namespace with a bridge for
its hosts (it is their gateway, ``.254``) and one /30 veth to every spine; a spine is a namespace
routing each leaf's host subnet back to that leaf. Each leaf routes every other leaf's hosts by one
multipath route over all spines, hashed per flow (``net.ipv4.fib_multipath_hash_policy = 1``: the L4
hash; for a locally generated flow Linux uses the socket's own random hash, so the path of a test is
not predictable, only measurable). Every link is shaped on both ends' egress with ``tbf`` to the same
rate: 4 hosts x R down and 4 spines x R up per leaf is 1:1, so a healthy fabric has no bottleneck and
every slow test is either a planted fault or a collision of two tests on one leaf-spine link.

Which spine carried which flow is measured, not guessed: each spine counts the bytes of every
ordered cross-leaf host pair in an nftables ``forward`` chain (``ip saddr A ip daddr B counter``),
and :class:`SpineSampler` reads those counters every fraction of a second (one ``nft -j`` loop per
spine), so that two flows that crossed one directed leaf-spine link at the same time can be found.

Hosts keep a flow on its path after a retransmission timeout (``net.core.txrehash = 0``), as a
switch's static hash would. Every namespace this makes is deleted on exit and on error.
Measured facts behind the shape: ``../shared/reference/ECMP-FABRIC.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.support.env import need_root, need_tool


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30)


def _ip(ns: str, *args: str) -> None:
    _run("ip", "-n", ns, *args)


def _sysctl(ns: str, key: str, value: str) -> None:
    _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}")


def _tbf(ns: str, dev: str, rate: str) -> None:
    _run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
         "burst", "64kb", "latency", "50ms")  # fmt: skip


@dataclass(frozen=True)
class RoutedFabric:
    """The namespaces and addresses of one built fabric (host ``i`` on leaf ``leaf_of[i]``)."""

    tag: str
    hosts: tuple[str, ...]
    """Namespace of host i."""
    leaves: tuple[str, ...]
    spines: tuple[str, ...]
    leaf_of: tuple[int, ...]
    rate: str
    addresses: tuple[str, ...] = field(default=())

    def address(self, host: int) -> str:
        return self.addresses[host]

    def host_name(self, host: int) -> str:
        """The hostname host ``i`` runs under (its own UTS namespace)."""
        return f"h{host:02d}"

    def host_port(self, host: int) -> int:
        """Its port on its leaf (1-based, in host order on that leaf)."""
        leaf = self.leaf_of[host]
        return [h for h in range(len(self.hosts)) if self.leaf_of[h] == leaf].index(host) + 1

    def plan_csv(self, hosts: list[int] | None = None) -> str:
        """The fabric's cabling as an ``ibdiag fabric --expect`` plan (CSV): each host's cable to its
        leaf port (adapter ``eth0``), each leaf's uplink to each spine (leaf port 100 + spine)."""
        lines = ["# node,adapter,switch,port"]
        for h in hosts if hosts is not None else range(len(self.hosts)):
            lines.append(f"{self.host_name(h)},eth0,leaf{self.leaf_of[h]},{self.host_port(h)}")
        for li in range(len(self.leaves)):
            for s in range(len(self.spines)):
                lines.append(f"leaf{li},{100 + s},spine{s},{li + 1}")
        return "\n".join(lines) + "\n"

    def slow_host_link(self, host: int, rate: str) -> None:
        """Plant a fault: host ``i``'s cable shaped to ``rate`` both ways."""
        _tbf(self.hosts[host], "eth0", rate)
        _tbf(self.leaves[self.leaf_of[host]], f"h{host}", rate)

    def exec_prefix(self, host: int) -> list[str]:
        """Run a command as host ``i``: in its namespace, under its own hostname."""
        return ["ip", "netns", "exec", self.hosts[host], "unshare", "--uts", "sh", "-c",
                f'hostname {self.host_name(host)} && exec "$@"', "sh"]  # fmt: skip


def _subnet(leaf: int) -> str:
    return f"10.{60 + leaf}.0"


def _uplink(leaf: int, spine: int) -> tuple[str, str]:
    """The /30 between a leaf and a spine: (leaf side, spine side)."""
    base = 4 * spine
    return f"10.250.{leaf}.{base + 1}", f"10.250.{leaf}.{base + 2}"


@contextmanager
def routed_fabric(
    hosts_per_leaf: int = 4, leaves: int = 2, spines: int = 4, rate: str = "100mbit", tag: str = "e"
) -> Iterator[RoutedFabric]:
    """Build the fabric (module docstring), yield it, delete every namespace it made."""
    need_root()
    for tool in ("ip", "tc", "nft", "unshare"):
        need_tool(tool)
    pid = os.getpid()
    n = hosts_per_leaf * leaves
    leaf_of = tuple(h // hosts_per_leaf for h in range(n))
    fab = RoutedFabric(
        tag,
        tuple(f"ibd{tag}h{h}-{pid}" for h in range(n)),
        tuple(f"ibd{tag}l{li}-{pid}" for li in range(leaves)),
        tuple(f"ibd{tag}s{s}-{pid}" for s in range(spines)),
        leaf_of,
        rate,
        tuple(f"{_subnet(leaf_of[h])}.{h % hosts_per_leaf + 1}" for h in range(n)),
    )
    made: list[str] = []
    try:
        for ns in (*fab.leaves, *fab.spines, *fab.hosts):
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _ip(ns, "link", "set", "lo", "up")
        _routers(fab)
        _hosts(fab)
        _counters(fab)
        yield fab
    finally:
        for ns in reversed(made):  # a namespace takes its veth ends, and so their peers, with it
            _run("ip", "netns", "del", ns, check=False)


def _routers(fab: RoutedFabric) -> None:
    for ns in (*fab.leaves, *fab.spines):
        for key, value in (
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
            ("net.ipv4.fib_multipath_hash_policy", "1"),
        ):
            _sysctl(ns, key, value)
    for li, leaf in enumerate(fab.leaves):
        _ip(leaf, "link", "add", "br0", "type", "bridge")
        _ip(leaf, "addr", "add", f"{_subnet(li)}.254/24", "dev", "br0")
        _ip(leaf, "link", "set", "br0", "up")
        for s, spine in enumerate(fab.spines):
            mine, theirs = _uplink(li, s)
            _ip(leaf, "link", "add", f"s{s}", "type", "veth", "peer", "name", f"l{li}",
                "netns", spine)  # fmt: skip
            _ip(leaf, "addr", "add", f"{mine}/30", "dev", f"s{s}")
            _ip(spine, "addr", "add", f"{theirs}/30", "dev", f"l{li}")
            _ip(leaf, "link", "set", f"s{s}", "up")
            _ip(spine, "link", "set", f"l{li}", "up")
            _tbf(leaf, f"s{s}", fab.rate)
            _tbf(spine, f"l{li}", fab.rate)
            _ip(spine, "route", "add", f"{_subnet(li)}.0/24", "via", mine)
    for li, leaf in enumerate(fab.leaves):
        for other in range(len(fab.leaves)):
            if other == li:
                continue
            hops: list[str] = []
            for s in range(len(fab.spines)):
                hops += ["nexthop", "via", _uplink(li, s)[1], "dev", f"s{s}"]
            _ip(leaf, "route", "add", f"{_subnet(other)}.0/24", *hops)


def _hosts(fab: RoutedFabric) -> None:
    for h, ns in enumerate(fab.hosts):
        li = fab.leaf_of[h]
        leaf = fab.leaves[li]
        _ip(ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"h{h}", "netns", leaf)
        _ip(leaf, "link", "set", f"h{h}", "master", "br0", "up")
        _ip(ns, "addr", "add", f"{fab.address(h)}/24", "dev", "eth0")
        _ip(ns, "link", "set", "eth0", "up")
        _ip(ns, "route", "add", "default", "via", f"{_subnet(li)}.254")
        _sysctl(ns, "net.core.txrehash", "0")
        _tbf(ns, "eth0", fab.rate)
        _tbf(leaf, f"h{h}", fab.rate)


def _counters(fab: RoutedFabric) -> None:
    """In each spine: a forward chain counting every ordered cross-leaf host pair's bytes."""
    rules = [
        "table inet ibdiag {",
        " chain pairs {",
        "  type filter hook forward priority 0; policy accept;",
    ]
    for a in range(len(fab.hosts)):
        for b in range(len(fab.hosts)):
            if fab.leaf_of[a] != fab.leaf_of[b]:
                rules.append(f"  ip saddr {fab.address(a)} ip daddr {fab.address(b)} counter")
    text = "\n".join([*rules, " }", "}"]) + "\n"
    for spine in fab.spines:
        subprocess.run(["ip", "netns", "exec", spine, "nft", "-f", "-"], input=text, check=True,
                       capture_output=True, text=True, timeout=30)  # fmt: skip


Sample = tuple[float, dict[tuple[str, str], int]]
"""(monotonic time, (saddr, daddr) -> bytes so far) of one spine."""


class SpineSampler:
    """Every spine's per-host-pair byte counters, read every ``period_s`` in the background (one
    ``nft -j list chain`` loop per spine namespace, each line timestamped as it arrives)."""

    def __init__(self, fab: RoutedFabric, period_s: float = 0.2) -> None:
        self.fab = fab
        self.samples: list[list[Sample]] = [[] for _ in fab.spines]
        self._procs: list[subprocess.Popen[str]] = []
        self._threads: list[threading.Thread] = []
        self.period_s = period_s

    def __enter__(self) -> SpineSampler:
        loop = f"while :; do nft -j list chain inet ibdiag pairs; sleep {self.period_s}; done"
        for s, spine in enumerate(self.fab.spines):
            p = subprocess.Popen(["ip", "netns", "exec", spine, "sh", "-c", loop],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
            self._procs.append(p)
            t = threading.Thread(target=self._read, args=(s, p), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _read(self, s: int, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            now = time.monotonic()
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            counts: dict[tuple[str, str], int] = {}
            for item in doc.get("nftables", []):
                rule = item.get("rule")
                if not rule:
                    continue
                src = dst = None
                got = 0
                for ex in rule.get("expr", []):
                    m = ex.get("match")
                    if m and m["left"].get("payload", {}).get("field") == "saddr":
                        src = m["right"]
                    elif m and m["left"].get("payload", {}).get("field") == "daddr":
                        dst = m["right"]
                    elif "counter" in ex:
                        got = int(ex["counter"]["bytes"])
                if src and dst:
                    counts[(src, dst)] = got
            self.samples[s].append((now, counts))

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
        for p in self._procs:
            p.wait(timeout=10)
        for t in self._threads:
            t.join(timeout=5)

    def flows(self, min_share: float = 0.25) -> list[tuple[float, float, int, str, str]]:
        """Every interval in which a host pair sent at least ``min_share`` of the link's rate through a
        spine: (start, end, spine, saddr, daddr)."""
        rate_bps = _rate_bps(self.fab.rate)
        out = []
        for s, samples in enumerate(self.samples):
            for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
                dt = t1 - t0
                if dt <= 0:
                    continue
                for key, total in c1.items():
                    sent = total - c0.get(key, 0)
                    if sent * 8 >= min_share * rate_bps * dt:
                        out.append((t0, t1, s, key[0], key[1]))
        return out


def _rate_bps(rate: str) -> float:
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for suffix, scale in units.items():
        if rate.endswith(suffix):
            return float(rate[: -len(suffix)]) * scale
    return float(rate)


def collisions(
    fab: RoutedFabric, sampler: SpineSampler, *, min_s: float = 0.6, min_share: float = 0.2
) -> list[tuple[int, str, str, str, str, float]]:
    """Two host pairs that sent through one spine from the same leaf (or to the same leaf) at the same
    time, for at least ``min_s`` in consecutive samples: (spine, flow 1, flow 2, seconds)."""
    leaf = {fab.address(h): fab.leaf_of[h] for h in range(len(fab.leaf_of))}
    by_spine: dict[int, dict[tuple[str, str], list[tuple[float, float]]]] = {}
    for t0, t1, s, src, dst in sampler.flows(min_share):
        by_spine.setdefault(s, {}).setdefault((src, dst), []).append((t0, t1))
    out = []
    for s, flows in by_spine.items():
        keys = sorted(flows)
        for i, f in enumerate(keys):
            for g in keys[i + 1 :]:
                if leaf[f[0]] != leaf[g[0]] and leaf[f[1]] != leaf[g[1]]:
                    continue  # different source and destination leaves: no directed link shared
                both = sorted(set(flows[f]) & set(flows[g]))
                run = _longest_run(both)
                if run >= min_s:
                    out.append((s, f[0], f[1], g[0], g[1], run))
    return out


def _longest_run(intervals: list[tuple[float, float]]) -> float:
    """The longest stretch of back-to-back sample intervals, in seconds."""
    best = cur = 0.0
    end = None
    for t0, t1 in intervals:
        cur = cur + (t1 - t0) if end is not None and abs(t0 - end) < 1e-9 else t1 - t0
        end = t1
        best = max(best, cur)
    return best
