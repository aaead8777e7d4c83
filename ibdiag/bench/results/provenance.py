"""Where a benchmark run's numbers come from: measured by ibdiag, or read from a tool's log, and what that log says.

:class:`Provenance` is the place for everything a result is only comparable with: today the file a run
was imported from (:class:`ImportInfo`), the NCCL versions and warnings in its log, the command line
found around the table (:class:`CommandLine`) and what NCCL's ``NCCL INFO`` lines say about the path
the data took (:class:`NcclPath`: NET/IB or NET/Socket, GPUDirect RDMA, SHARP/CollNet/NVLS). The
tool-specific header fields stay with the run's kind (``NcclTestsLog``, ``PerftestLog``). The JSON is
flat, with ``command`` and ``nccl_path`` objects; a field the source does not have is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ibdiag.bench.results.jsonfields import put
from ibdiag.jsonread import Fields, Scalar

#: Most warning lines kept from a log (the count says how many there were).
MAX_WARNINGS = 5
#: Most hosts, devices or environment variables kept from a command line or NCCL's lines.
MAX_NAMES = 256

#: The benchmark options a command line is read for, by tool: flag -> name in ``CommandLine.options``
#: (nccl-tests ``src/common.cu`` getopt table; perftest ``perftest_parameters.c``).
NCCL_TESTS_OPTIONS = {
    "-b": "min_bytes", "--minbytes": "min_bytes", "-e": "max_bytes", "--maxbytes": "max_bytes",
    "-f": "step_factor", "--stepfactor": "step_factor", "-g": "gpus_per_thread", "--ngpus": "gpus_per_thread",
    "-t": "threads", "--nthreads": "threads", "-n": "iters", "--iters": "iters",
    "-w": "warmup_iters", "--warmup_iters": "warmup_iters", "-c": "check", "--check": "check",
    "-d": "dtype", "--datatype": "dtype", "-o": "redop", "--op": "redop", "-z": "blocking", "--blocking": "blocking",
    "-G": "cuda_graph", "--cudagraph": "cuda_graph", "-N": "cycles", "--run_cycles": "cycles",
    "-I": "per_iter_timing", "--per_iter_timing": "per_iter_timing",
}  # fmt: skip
PERFTEST_OPTIONS = {
    "-d": "device", "--ib-dev": "device", "-x": "gid_index", "--gid-index": "gid_index",
    "-q": "qps", "--qp": "qps", "-s": "size", "--size": "size", "-a": "all_sizes", "--all": "all_sizes",
    "-D": "duration_s", "--duration": "duration_s", "--report_gbits": "report_gbits", "-n": "iters", "--iters": "iters",
    "-l": "post_list", "--post_list": "post_list", "-b": "bidirectional", "--bidirectional": "bidirectional",
}  # fmt: skip
#: perftest's options that take no value (every nccl-tests option takes one).
PERFTEST_FLAGS = frozenset({"-a", "--all", "--report_gbits", "-b", "--bidirectional"})


@dataclass(frozen=True)
class RunPosition:
    """Which of several runs in one file this is (they are never averaged)."""

    index: int
    """1-based."""
    count: int
    separation: str
    """How the runs were told apart: ``one after the other``, ``one run per output tag``, or
    ``interleaved (untagged lines; rows attributed in order of appearance)``."""

    @property
    def interleaved(self) -> bool:
        return self.separation.startswith("interleaved")


@dataclass(frozen=True)
class ImportInfo:
    """The log a run was read from: the tool that wrote it, the file, and where in it the run is."""

    tool: str
    """``nccl-tests`` or ``perftest``."""
    source: str
    """The file as given (``<stdin>`` for ``-``)."""
    format: str | None = None
    """The log's format: nccl-tests' era (``2022-2025``), ``json v2``, perftest's ``out_json``."""
    first_line: int | None = None
    """The line the run starts at (text logs)."""
    tag: str | None = None
    """The launcher's output tag of the run's lines (``1,0`` from ``mpirun --tag-output``)."""
    position: RunPosition | None = None
    """Set when the file holds several runs."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "tool": self.tool,
            "source": self.source,
            "format": self.format,
            "first_line": self.first_line,
        }
        put(doc, "tag", self.tag)
        if self.position is not None:
            doc.update(
                run_index=self.position.index,
                run_count=self.position.count,
                separation=self.position.separation,
            )
        return doc

    @classmethod
    def read(cls, f: Fields) -> ImportInfo:
        index = f.integer("run_index", 1, 1 << 20)
        position = None
        if index is not None:
            count = f.integer("run_count", index, 1 << 20) or index
            position = RunPosition(index, count, f.text("separation") or "separate")
        return cls(
            tool=f.text("tool", required=True),
            source=f.text("source") or "?",
            format=f.text("format"),
            first_line=f.integer("first_line", 1),
            tag=f.text("tag"),
            position=position,
        )


@dataclass(frozen=True)
class CommandLine:
    """The command that produced the log, as found around the table (a prompt line, a script's echo).

    ``options`` holds the benchmark's own flags by name (:data:`NCCL_TESTS_OPTIONS`,
    :data:`PERFTEST_OPTIONS`): sizes in bytes, counts as integers, flags as True, the rest as given.
    """

    text: str
    """The command as read (cut at 500 characters)."""
    binary: str | None = None
    """``all_reduce_perf``, ``ib_write_bw``."""
    launcher: str | None = None
    """``mpirun`` (``mpiexec``), ``srun``, or None when the binary was run directly."""
    ranks: int | None = None
    """``mpirun -np N`` / ``srun -n N``."""
    nodes: int | None = None
    """``srun -N N``, or the hosts of ``mpirun -H``."""
    tasks_per_node: int | None = None
    """``srun --ntasks-per-node N``, ``mpirun -npernode N`` / ``--map-by ppr:N:node``."""
    hosts: tuple[str, ...] = ()
    """``mpirun -H a:8,b:8`` / ``--host``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """``mpirun -x VAR=value`` and ``VAR=value`` before the command."""
    options: Mapping[str, Scalar] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "binary": self.binary,
            "launcher": self.launcher,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "tasks_per_node": self.tasks_per_node,
            "hosts": list(self.hosts),
            "env": dict(self.env),
            "options": dict(self.options),
        }

    @classmethod
    def read(cls, f: Fields) -> CommandLine:
        env = f.scalars("env")
        return cls(
            text=f.text("text") or "",
            binary=f.text("binary"),
            launcher=f.text("launcher"),
            ranks=f.integer("ranks", 1, 1 << 24),
            nodes=f.integer("nodes", 1, 1 << 24),
            tasks_per_node=f.integer("tasks_per_node", 1, 1 << 16),
            hosts=f.texts("hosts", MAX_NAMES),
            env={k: str(v) for k, v in env.items()},
            options=f.scalars("options"),
        )


#: ``ibv_wc_status`` as rdma-core's ibv_wc_status_str() names it (libibverbs/verbs.c): what a completion
#: error number in ``NET/IB : Got completion … with error N`` means.
WC_STATUS = {
    1: "local length error",
    2: "local QP operation error",
    3: "local EE context operation error",
    4: "local protection error",
    5: "work request flushed error",
    6: "memory management operation error",
    7: "bad response error",
    8: "local access error",
    9: "remote invalid request error",
    10: "remote access error",
    11: "remote operation error",
    12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded",
    14: "local RDD violation error",
    15: "remote invalid RD request",
    16: "operation aborted",
    17: "invalid EE context number",
    18: "invalid EE context state",
    19: "fatal error",
    20: "response timeout error",
    21: "general error",
}


@dataclass(frozen=True)
class CompletionError:
    """One ``NET/IB : Got completion … with error N … vendor err V`` of NCCL (or a CQE dump that the
    verbs provider printed, ``mlx5: host: got completion with error:``): the network failed the run."""

    status: int
    """``ibv_wc_status`` (12: transport retry counter exceeded; 4: local protection error)."""
    vendor_err: int | None = None
    """The adapter's vendor syndrome (mlx5: 129 = 0x81 with status 12, 81 = 0x51 with status 4)."""
    host: str | None = None
    """The host whose line said it (``node:pid:tid [dev]`` prefix, or the CQE dump's)."""
    peer: str | None = None
    """``from peer 10.0.0.2<54862>`` (NCCL 2.12 on)."""
    hca: str | None = None
    """``hca mlx5_10`` (NCCL 2.23 on)."""
    direction: str | None = None
    """``Send`` or ``Recv`` (NCCL 2.12 on)."""
    where: str = ""
    """``line 31`` (``, CQE dump`` when read from the provider's dump)."""

    @property
    def status_name(self) -> str:
        return WC_STATUS.get(self.status, "unknown status")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"status": self.status, "status_name": self.status_name}
        put(doc, "vendor_err", self.vendor_err)
        put(doc, "host", self.host)
        put(doc, "peer", self.peer)
        put(doc, "hca", self.hca)
        put(doc, "direction", self.direction)
        doc["where"] = self.where
        return doc

    @classmethod
    def read(cls, f: Fields) -> CompletionError:
        return cls(
            status=f.integer("status", 0, 255, required=True),
            vendor_err=f.integer("vendor_err", 0, 1 << 16),
            host=f.text("host"),
            peer=f.text("peer"),
            hca=f.text("hca"),
            direction=f.text("direction"),
            where=f.text("where") or "",
        )


@dataclass(frozen=True)
class NcclPath:
    """What NCCL's own ``NCCL INFO`` lines (``NCCL_DEBUG=INFO``) say about the path the data took."""

    transport: str | None = None
    """The network NCCL used between nodes: ``IB`` (InfiniBand or RoCE verbs) or ``Socket`` (TCP), from
    ``Using network X``, else ``via NET/X`` channel lines, else the last ``NET/X : Using`` line."""
    net_plugin: str | None = None
    """``internal`` (no plugin found) or the plugin's name (``NET/Plugin`` lines)."""
    devices: tuple[str, ...] = ()
    """What ``NET/IB : Using`` / ``NET/Socket : Using`` listed: ``mlx5_0:1/IB``, ``mlx5_1:1/RoCE``, ``eth0``."""
    gdr: bool | None = None
    """GPUDirect RDMA: True when channels went ``via NET/IB/0/GDRDMA`` (or ``GDR 1``), False when network
    channels were listed without it (or ``GDR 0``), None when the log does not say."""
    sharp: bool | None = None
    """SHARP in-network reduction named (a SHARP plugin, ``CollNet`` over SHARP)."""
    collnet: bool | None = None
    """CollNet channels above 0."""
    nvls: bool | None = None
    """NVLink SHARP (NVLS) channels above 0."""
    algorithms: tuple[str, ...] = ()
    """``ring``, ``tree`` (``Connected all rings/trees``, ``NCCL_ALGO``)."""
    channels: int | None = None
    """``N coll channels``: the collective channels per communicator."""
    nodes: int | None = None
    """The nodes NCCL's lines show: ``nNodes N`` of the communicator's init line, or the hosts named in
    the ``host:pid:tid [dev] NCCL INFO`` prefixes, whichever is more."""
    info_lines: int = 0
    """How many ``NCCL INFO`` lines the log had (0: the path was told from the command line, the
    environment or WARN lines only)."""
    transport_source: str | None = None
    """Where ``transport`` came from: ``line 31: Using network Socket``, ``command line: NCCL_IB_DISABLE=1``,
    ``line 9: NCCL WARN Failed to open libibverbs.so`` ..."""
    gdr_source: str | None = None
    """Where ``gdr`` came from (GPUDirect RDMA is on only where the IB/RoCE path says so)."""
    hosts: tuple[str, ...] = ()
    """The hosts named in NCCL's line prefixes (``node01:61000:61020 [0] NCCL INFO``)."""
    ranks: int | None = None
    """``nranks N`` of the communicator's init lines (the largest communicator)."""
    gid_index: int | None = None
    """The RoCE GID index: ``NCCL_IB_GID_INDEX`` (set by environment, on the command line), else the
    ``GID N`` of the ``NET/IB: … qpn … GID 3 (0/…)`` connection lines when they show one only."""
    gids: tuple[str, ...] = ()
    """The GIDs the connection lines show: ``3 ::ffff:192.168.100.16``, ``0 fe80::/64 (link-local)``."""
    gid_source: str | None = None
    completion_errors: tuple[CompletionError, ...] = ()
    """The first ``NET/IB : Got completion … with error`` lines and CQE dumps (at most MAX_WARNINGS)."""
    completion_error_count: int = 0
    """How many there were."""

    def to_json(self) -> dict[str, Any]:
        doc = self._core_json()
        put(doc, "ranks", self.ranks)
        put(doc, "gid_index", self.gid_index)
        put(doc, "gids", self.gids)
        put(doc, "gid_source", self.gid_source)
        put(doc, "completion_errors", [c.to_json() for c in self.completion_errors])
        put(doc, "completion_error_count", self.completion_error_count or None)
        return doc

    def _core_json(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "net_plugin": self.net_plugin,
            "devices": list(self.devices),
            "gdr": self.gdr,
            "sharp": self.sharp,
            "collnet": self.collnet,
            "nvls": self.nvls,
            "algorithms": list(self.algorithms),
            "channels": self.channels,
            "nodes": self.nodes,
            "info_lines": self.info_lines,
            "transport_source": self.transport_source,
            "gdr_source": self.gdr_source,
            "hosts": list(self.hosts),
        }

    @classmethod
    def read(cls, f: Fields) -> NcclPath:
        return cls(
            transport=f.text("transport"),
            net_plugin=f.text("net_plugin"),
            devices=f.texts("devices", MAX_NAMES),
            gdr=f.flag("gdr"),
            sharp=f.flag("sharp"),
            collnet=f.flag("collnet"),
            nvls=f.flag("nvls"),
            algorithms=f.texts("algorithms", 8),
            channels=f.integer("channels", 0, 1 << 16),
            nodes=f.integer("nodes", 1, 1 << 24),
            info_lines=f.integer("info_lines", 0) or 0,
            transport_source=f.text("transport_source"),
            gdr_source=f.text("gdr_source"),
            hosts=f.texts("hosts", MAX_NAMES),
            ranks=f.integer("ranks", 1, 1 << 24),
            gid_index=f.integer("gid_index", 0, 1 << 16),
            gids=f.texts("gids", MAX_NAMES),
            gid_source=f.text("gid_source"),
            completion_errors=f.objects("completion_errors", CompletionError.read, MAX_WARNINGS),
            completion_error_count=f.integer("completion_error_count", 0) or 0,
        )


@dataclass(frozen=True)
class Provenance:
    """What produced the numbers, as far as the run or its log says."""

    imported: ImportInfo | None = None
    """None: measured by ibdiag itself (its settings are in the run's ``measured`` part)."""
    nccl_version: str | None = None
    """The NCCL library version the log names (``NCCL version 2.18.5+cuda12.2``, ``-J``'s ``nccl_version``)."""
    nccl_tests_version: str | None = None
    nccl_errors: tuple[str, ...] = ()
    """nccl-tests' ``# error:`` lines (``-J``'s ``errors``)."""
    nccl_warnings: tuple[str, ...] = ()
    """The first NCCL WARN/ERROR lines of the log (``line 5: ...``), at most MAX_WARNINGS."""
    nccl_warning_count: int | None = None
    """How many NCCL WARN/ERROR lines the log has."""
    command: CommandLine | None = None
    """The command line found around the table."""
    nccl_path: NcclPath | None = None
    """What the log's ``NCCL INFO`` lines say (None when it has none)."""
    skipped_lines: int | None = None
    """Lines around the table that were not part of it (prompts, launcher output, debug lines)."""
    failure: str | None = None
    """The tool's own error line where a result was expected (``line 12: Test NCCL failure common.cu:958
    ...``, ``line 20: Couldn't connect to 10.0.0.2:18515``): the run failed."""

    def to_json(self) -> dict[str, Any]:
        doc = {} if self.imported is None else self.imported.to_json()
        if self.command is not None:
            doc["command"] = self.command.to_json()
        if self.nccl_path is not None:
            doc["nccl_path"] = self.nccl_path.to_json()
        put(doc, "skipped_lines", self.skipped_lines)
        put(doc, "nccl_tests_version", self.nccl_tests_version)
        put(doc, "nccl_version", self.nccl_version)
        put(doc, "nccl_errors", self.nccl_errors)
        put(doc, "failure", self.failure)
        if self.nccl_warnings or self.nccl_warning_count:
            doc["nccl_warning_count"] = self.nccl_warning_count or len(self.nccl_warnings)
            doc["nccl_warnings"] = list(self.nccl_warnings)
        return doc

    @classmethod
    def read(cls, f: Fields) -> Provenance:
        return cls(
            imported=ImportInfo.read(f) if f.has("tool") else None,
            nccl_version=f.text("nccl_version"),
            nccl_tests_version=f.text("nccl_tests_version"),
            nccl_errors=f.texts("nccl_errors", 1 << 16),
            nccl_warnings=f.texts("nccl_warnings", 1 << 16),
            nccl_warning_count=f.integer("nccl_warning_count", 0),
            command=_maybe(f, "command", CommandLine.read),
            nccl_path=_maybe(f, "nccl_path", NcclPath.read),
            skipped_lines=f.integer("skipped_lines", 0),
            failure=f.text("failure"),
        )


def _maybe(f: Fields, key: str, read: Any) -> Any:
    sub = f.object(key)
    return None if sub is None else read(sub)
