"""What surrounds a benchmark's table: the command line that ran it and NCCL's own debug lines.

Pure functions of lines. :class:`Context` is fed every line of a log before the table readers see
it; it keeps

* command lines (:func:`command_line`): a shell prompt (``root@node1:~# ``, ``$ ``, ``+ `` of
  ``bash -x``) or a script's ``running: `` followed by a launcher (``mpirun``/``mpiexec``/``srun``), a
  wrapper (``sudo``, ``env``, ``numactl`` ...), ``VAR=value`` words or the benchmark binary itself
  (``*_perf``, ``ib_*_bw``/``ib_*_lat``). The launcher's rank/node options and the binary's own options
  are read into a :class:`~ibdiag.bench.results.provenance.CommandLine`;
* ``NCCL INFO``/``WARN`` lines (``NCCL_DEBUG=INFO``): the NCCL version, the network and its devices,
  GPUDirect RDMA, SHARP/CollNet/NVLS, ring/tree, channel counts (a
  :class:`~ibdiag.bench.results.provenance.NcclPath`), and the warning lines.

Facts: NCCL's ``init.cc``/``transport/net_ib.cc``/``net_socket.cc`` log lines (``NET/IB : Using
[0]mlx5_0:1/IB ; OOB ib0:...``, ``Using network IB``, ``Channel 00/0 : 0[0] -> 1[1] [send] via
NET/IB/0/GDRDMA``, ``32 coll channels, 0 collnet channels, 0 nvls channels``, ``comm ... nNodes 2``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ibdiag.bench.importers.lines import Line, iter_lines
from ibdiag.bench.results.provenance import (
    MAX_NAMES,
    MAX_WARNINGS,
    NCCL_TESTS_OPTIONS,
    PERFTEST_FLAGS,
    PERFTEST_OPTIONS,
    CommandLine,
    NcclPath,
)
from ibdiag.jsonread import Scalar

NCCL_DEBUG = re.compile(r"\bNCCL (INFO|WARN|TRACE|ERROR|ABORT)\b")
_NCCL_VERSION = re.compile(r"\bNCCL version (\S+)")
_BINARY = re.compile(
    r"^(?:[a-z0-9]+(?:_[a-z0-9]+)*_perf(?:_mpi)?|ib_(?:write|read|send|atomic)_(?:bw|lat))$"
)
_PROMPT = re.compile(r"^(?:\([\w.-]+\)\s+)?(?:[\w.-]+@[\w.-]+(?::[^\s$#%]*)?\s*[$#%]|[$#%>+])\s+")
_LAUNCHERS = {
    "mpirun": "mpirun",
    "mpiexec": "mpirun",
    "mpiexec.hydra": "mpirun",
    "orterun": "mpirun",
    "prterun": "mpirun",
    "srun": "srun",
}
_WRAPPERS = frozenset(
    {
        "sudo",
        "env",
        "time",
        "numactl",
        "taskset",
        "timeout",
        "nohup",
        "exec",
        "stdbuf",
        "nice",
        "chrt",
        "ionice",
    }
)
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SIZE = re.compile(r"^(\d+(?:\.\d*)?)\s*([kKmMgG]?)$")
_INT_OPTIONS = frozenset(
    {
        "step_factor",
        "gpus_per_thread",
        "threads",
        "iters",
        "warmup_iters",
        "check",
        "blocking",
        "cuda_graph",
        "cycles",
        "per_iter_timing",
        "gid_index",
        "qps",
        "duration_s",
        "post_list",
    }
)
_SIZE_OPTIONS = frozenset({"min_bytes", "max_bytes", "size"})
MAX_COMMAND = 500


def binary_name(token: str) -> str | None:
    """``./build/all_reduce_perf`` -> ``all_reduce_perf``; None when the token is not a benchmark binary."""
    base = token.rsplit("/", 1)[-1]
    return base if _BINARY.match(base) else None


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def _start(words: list[str], *, anywhere: bool) -> int | None:
    """Where a command starts in ``words``: the first launcher, wrapper, VAR=value or binary word at
    the start or (``anywhere``) after a word ending in ``:`` (``running: mpirun ...``)."""
    for j, w in enumerate(words):
        if j > 0 and not (anywhere and words[j - 1].endswith(":")):
            continue
        base = w.rsplit("/", 1)[-1]
        if base in _LAUNCHERS or base in _WRAPPERS or _ENV_WORD.match(w) or binary_name(w):
            return j
    return None


def _size(value: str) -> int | None:
    """nccl-tests' sizes: a number with K/M/G (binary) or plain bytes."""
    m = _SIZE.match(value.strip())
    if not m:
        return None
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2).lower()]
    v = float(m.group(1)) * scale
    return int(v) if v < 2**62 else None


def _option_value(name: str, value: str) -> Scalar:
    if name in _SIZE_OPTIONS:
        v = _size(value)
        return v if v is not None else value[:100]
    if name in _INT_OPTIONS:
        try:
            return int(value, 0)
        except ValueError:
            return value[:100]
    return value[:100]


def _binary_options(binary: str, words: list[str]) -> dict[str, Scalar]:
    table = PERFTEST_OPTIONS if binary.startswith("ib_") else NCCL_TESTS_OPTIONS
    flags = PERFTEST_FLAGS if binary.startswith("ib_") else frozenset()
    out: dict[str, Scalar] = {}
    i = 0
    while i < len(words):
        w = words[i]
        key, attached = w, None
        if w.startswith("--") and "=" in w:
            key, attached = w.split("=", 1)
        elif len(w) > 2 and w[0] == "-" and w[1] != "-" and w[:2] in table and w[:2] not in flags:
            key, attached = w[:2], w[2:]  # getopt's -b8
        name = table.get(key)
        if name is None:
            i += 1
            continue
        if key in flags:
            out[name] = True
            i += 1
            continue
        if attached is None:
            if i + 1 >= len(words):
                break
            attached = words[i + 1]
            i += 1
        out[name] = _option_value(name, attached)
        i += 1
    return out


def _int(value: str) -> int | None:
    try:
        v = int(value)
    except ValueError:
        return None
    return v if 0 < v < 1 << 24 else None


def _hosts(value: str) -> list[str]:
    return [h.split(":", 1)[0] for h in value.split(",") if h.split(":", 1)[0]]


def command_line(text: str) -> CommandLine | None:
    """The command in one line of a log, or None when the line is not a command running a benchmark."""
    s = text.strip()
    m = _PROMPT.match(s)
    if m:
        s = s[m.end() :]
    words = _words(s)
    # after a bare '#' (a root prompt, or one of nccl-tests' comment lines) the command must come first
    j = _start(words, anywhere=not (m and m.group(0).strip() == "#"))
    if j is None:
        return None
    words = words[j:]
    b = next((i for i, w in enumerate(words) if binary_name(w)), None)
    if b is None:
        return None
    binary = binary_name(words[b])
    assert binary is not None
    launcher, ranks, nodes, per_node = None, None, None, None
    hosts: list[str] = []
    env: dict[str, str] = {}
    pre = words[:b]
    i = 0
    while i < len(pre):
        w = pre[i]
        nxt = pre[i + 1] if i + 1 < len(pre) else ""
        opt, eq = (w.split("=", 1) + [""])[:2] if w.startswith("--") and "=" in w else (w, None)
        val = eq if eq is not None else nxt
        took = eq is None
        base = w.rsplit("/", 1)[-1]
        if launcher is None and base in _LAUNCHERS:
            launcher = _LAUNCHERS[base]
            took = False
        elif _ENV_WORD.match(w) and (launcher is None or pre[i - 1] != "-x"):
            k, v = w.split("=", 1)
            env[k[:100]] = v[:200]
            took = False
        elif launcher == "mpirun" and opt in ("-np", "-n", "--np", "-c"):
            ranks = _int(val)
        elif launcher == "mpirun" and opt in ("-H", "--host", "-host", "-hosts", "--hosts"):
            hosts += _hosts(val)
        elif launcher == "mpirun" and opt == "-x":
            k, _, v = val.partition("=")
            env[k[:100]] = v[:200]
        elif launcher == "mpirun" and opt in ("-npernode", "--npernode", "-N", "-ppn", "--ppn"):
            per_node = _int(val)
        elif (
            launcher == "mpirun"
            and opt in ("--map-by", "-map-by")
            and val.startswith("ppr:")
            and val.endswith(":node")
        ):
            per_node = _int(val.split(":")[1])
        elif launcher == "srun" and opt in ("-N", "--nodes"):
            nodes = _int(val.split("-")[0])
        elif launcher == "srun" and opt in ("-n", "--ntasks"):
            ranks = _int(val)
        elif launcher == "srun" and opt == "--ntasks-per-node":
            per_node = _int(val)
        else:
            took = False
        i += 2 if took else 1
    hosts = list(dict.fromkeys(hosts))[:MAX_NAMES]
    if nodes is None and hosts:
        nodes = len(hosts)
    return CommandLine(
        text=" ".join(words)[:MAX_COMMAND],
        binary=binary,
        launcher=launcher,
        ranks=ranks,
        nodes=nodes,
        tasks_per_node=per_node,
        hosts=tuple(hosts),
        env=dict(list(env.items())[:MAX_NAMES]),
        options=_binary_options(binary, words[b + 1 :]),
    )


@dataclass
class _PathFacts:
    using_network: str | None = None
    net_using: str | None = None
    channel_nets: set[str] = field(default_factory=set)
    devices: dict[str, None] = field(default_factory=dict)
    plugin: str | None = None
    gdr_yes: int = 0
    gdr_no: int = 0
    sharp: bool = False
    collnet: int | None = None
    nvls: int | None = None
    algorithms: dict[str, None] = field(default_factory=dict)
    channels: int | None = None
    nodes: int | None = None
    info_lines: int = 0


_USING_NETWORK = re.compile(r"\bUsing network (\S+)")
_NET_USING = re.compile(r"\bNET/(IB|Socket)\s*:\s*Using\s+(.*)")
_DEVICE = re.compile(r"\[\d+\]([^\s;\[]+)")
_VIA_NET = re.compile(r"\bvia NET/(\w+)(?:/\d+)?(?:\(\d+\))?(/GDRDMA)?")
_GDR = re.compile(r"\bGDR (\d)\b")
_PLUGIN_NONE = re.compile(
    r"NET/Plugin.*(?:No plugin found|using internal implementation|Using internal network plugin)",
    re.IGNORECASE,
)
_PLUGIN_LOADED = re.compile(r"NET/Plugin\s*:?\s*Loaded (?:net|coll) plugin (.+?)(?: \(v\d+\))?\s*$")
_CHANNELS = re.compile(r"\b(\d+) coll channels\b")
_COLLNET = re.compile(r"\b(\d+) collnet channels\b")
_NVLS = re.compile(r"\b(\d+) nvls channels\b")
_NNODES = re.compile(r"\bnNodes (\d+)\b")
_ALGO_ENV = re.compile(r"\bNCCL_ALGO set by environment to (\S+)")


class Context:
    """Fed every line of a log; keeps its command lines and NCCL lines (see the module docstring)."""

    def __init__(self) -> None:
        self.commands: list[tuple[int, CommandLine]] = []
        self.nccl_version: str | None = None
        self.warnings: list[tuple[int, str]] = []
        self.warning_count = 0
        self.facts = _PathFacts()
        self.skipped = 0

    def table_lines(self, raw_lines: Iterable[str]) -> Iterator[Line]:
        """Every line (see :func:`iter_lines`) that :meth:`feed` does not take, lazily."""
        return (ln for ln in iter_lines(raw_lines) if not self.feed(ln))

    def feed(self, line: Line) -> bool:
        """True when the line is a command line or an NCCL debug line (not part of any table)."""
        s = line.text.strip()
        if not s or line.truncated:
            return False
        dbg = NCCL_DEBUG.search(s) if "NCCL " in s else None
        if dbg:
            self._nccl(dbg.group(1), s[dbg.end() :], line.number)
            return True
        if s.startswith("NCCL version"):
            m = _NCCL_VERSION.search(s)
            if m:
                self.nccl_version = m.group(1)[:100]
            return True
        if len(self.commands) < 64 and ("_perf" in s or "ib_" in s):
            cmd = command_line(s)
            if cmd is not None:
                self.commands.append((line.number, cmd))
                return True
        return False

    def _nccl(self, kind: str, body: str, number: int) -> None:
        if kind in ("WARN", "ERROR", "ABORT"):
            self.warning_count += 1
            if len(self.warnings) < MAX_WARNINGS:
                self.warnings.append((number, f"NCCL {kind}{body}"[:300]))
            return
        if kind != "INFO":
            return
        f = self.facts
        f.info_lines += 1
        # substring tests first: a regex per fact on every INFO line of a long log is the slow part
        if "NCCL version" in body:
            m = _NCCL_VERSION.search(body)
            if m:
                self.nccl_version = m.group(1)[:100]
                return
        if "Using network" in body:
            m = _USING_NETWORK.search(body)
            if m:
                f.using_network = m.group(1)[:40]
        if "Using" in body and "NET/" in body:
            m = _NET_USING.search(body)
            if m:
                f.net_using = m.group(1)
                for dev in _DEVICE.findall(m.group(2).split(";", 1)[0]):
                    name = dev if m.group(1) == "IB" else dev.split(":", 1)[0]
                    if len(f.devices) < MAX_NAMES:
                        f.devices[name[:80]] = None
        if "via NET/" in body:
            for net, gdr in _VIA_NET.findall(body):
                f.channel_nets.add(net)
                if gdr:
                    f.gdr_yes += 1
                elif net == "IB":
                    f.gdr_no += 1
        if "GDR " in body:
            m = _GDR.search(body)
            if m:
                if m.group(1) == "1":
                    f.gdr_yes += 1
                else:
                    f.gdr_no += 1
        if "NET/Plugin" in body:
            if _PLUGIN_NONE.search(body):
                f.plugin = f.plugin or "internal"
            else:
                m = _PLUGIN_LOADED.search(body)
                if m:
                    f.plugin = m.group(1)[:80]
        if ("SHARP" in body or "sharp" in body) and re.search(r"\bSHARP\b|\bsharp\b", body):
            f.sharp = True
        if " channels" in body:
            for rx, attr in ((_CHANNELS, "channels"), (_COLLNET, "collnet"), (_NVLS, "nvls")):
                m = rx.search(body)
                if m:
                    setattr(f, attr, int(m.group(1)))
        if "nNodes" in body:
            m = _NNODES.search(body)
            if m:
                f.nodes = max(f.nodes or 0, int(m.group(1))) or None
        if "Connected all rings" in body:
            f.algorithms["ring"] = None
        if "Connected all trees" in body:
            f.algorithms["tree"] = None
        if "NCCL_ALGO" in body:
            m = _ALGO_ENV.search(body)
            if m:
                for a in m.group(1).lower().split(","):
                    if a and len(f.algorithms) < 8:
                        f.algorithms[a[:20]] = None

    def command_for(self, start_line: int) -> CommandLine | None:
        """The last command line before ``start_line``, else the first one in the log."""
        before = [c for n, c in self.commands if n < start_line]
        if before:
            return before[-1]
        return self.commands[0][1] if self.commands else None

    def nccl_path(self) -> NcclPath | None:
        f = self.facts
        if not f.info_lines:
            return None
        transport = f.using_network
        if transport is None and f.channel_nets:
            transport = "IB" if "IB" in f.channel_nets else sorted(f.channel_nets)[0]
        if transport is None:
            transport = f.net_using
        gdr = True if f.gdr_yes else (False if f.gdr_no else None)
        return NcclPath(
            transport=transport,
            net_plugin=f.plugin,
            devices=tuple(f.devices),
            gdr=gdr,
            sharp=True if f.sharp else None,
            collnet=None if f.collnet is None else f.collnet > 0,
            nvls=None if f.nvls is None else f.nvls > 0,
            algorithms=tuple(f.algorithms),
            channels=f.channels,
            nodes=f.nodes,
            info_lines=f.info_lines,
        )
