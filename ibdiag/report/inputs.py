"""The files ``ibdiag report`` reads: found from directories, globs and names; each one checked.

Every file is untrusted: it must be a regular file of at most ``max_bytes``, JSON, an ibdiag envelope of
a schema the report knows (topo, counters, bench, sweep), and every value the report uses is checked
for type, range and printable text (:class:`~ibdiag.jsonread.JsonReader`). A file that fails is
*skipped* — named, with the reason — and the rest is reported; only when nothing is readable does the
command stop (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibdiag.counters.hw_spec import HW_JUDGED, HwGroup
from ibdiag.counters.spec import ERROR_COUNTERS
from ibdiag.errors import InputError
from ibdiag.findings.model import Finding, Severity
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.jsonread import MAX_DOCUMENT_BYTES, JsonFieldError, JsonReader, loads
from ibdiag.report.files import Skipped, find_files, shown_name
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import ADAPTER_RE, HOST_RE
from ibdiag.text import safe_value

SCHEMAS = {
    "ibdiag.topo/1": "topo",
    "ibdiag.counters/1": "counters",
    "ibdiag.bench/1": "bench",
    "ibdiag.sweep/1": "sweep",
    "ibdiag.job/1": "job",
}
#: Largest file read (a 16384-node x 8-rail sweep's JSON is 42 MiB for ring, 73 MiB for 8 random
#: rounds, benchmarks/sweep_scale.py); ``--max-file-size`` changes it. Memory is bounded apart from
#: it, by :func:`ibdiag.jsonread.loads`'s estimate (:data:`~ibdiag.jsonread.MAX_OBJECT_BYTES`).
DEFAULT_MAX_BYTES = MAX_DOCUMENT_BYTES
MAX_FINDINGS = 100_000
MAX_ADAPTERS = 256
MAX_PORTS = 16
_CHECK_RE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
_COUNTER_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
#: The shapes ibdiag topo checked when it read them (ibdiag.parse, ibdiag.node.driver).
_KERNEL_RELEASE_RE = re.compile(r"^[0-9A-Za-z][\x21-\x7e]{0,63}$")
_MODULE_RE = re.compile(r"^[A-Za-z0-9_]{1,55}$")
_VERSION_KINDS = ("version", "srcversion")


@dataclass(frozen=True)
class PortFacts:
    port: int
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None


@dataclass(frozen=True)
class AdapterFacts:
    name: str
    fw_ver: str | None
    board_id: str | None
    pcie_width: int | None
    pcie_speed_gts: float | None
    ports: tuple[PortFacts, ...]
    driver_module: str | None = None
    """``mlx5_core``: the kernel module of the adapter's driver (None in topo files of older versions)."""
    driver_version: str | None = None
    driver_version_kind: str | None = None
    """``version`` or ``srcversion`` (which one :attr:`driver_version` is); None: unknown."""


@dataclass(frozen=True)
class TopoFacts:
    """What a topo document says that a fleet compares (configuration, not measurements)."""

    gpus: int
    gpu_pcie_widths: tuple[int | None, ...]
    adapters: tuple[AdapterFacts, ...]
    gdr_module: str | None
    nvidia_driver: str | None
    nccl_ib_hca: str | None
    kernel_release: str | None = None
    """``uname -r`` (None: unknown, or a topo file of an older version)."""
    nccl_gid_index: str | None = None
    """``NCCL_IB_GID_INDEX`` of the environment topo judged (``nccl_env``); None: not set, or an older file."""


def _error_counters() -> frozenset[str]:
    """Counters whose non-zero value is an error: the IB error counters and the mlx5 loss/drop counters."""
    return frozenset(ERROR_COUNTERS) | {
        name for name, spec in HW_JUDGED.items() if spec.group is not HwGroup.CONGESTION
    }


@dataclass(frozen=True)
class CounterReading:
    """A non-zero error counter of one port (only those are kept: the rest says nothing to a fleet)."""

    adapter: str
    port: int | None
    counter: str
    value: float
    per_second: bool
    """True: a rate over ``interval_s`` (``--interval``/``--since``); False: a count since the last reset."""
    interval_s: float | None
    saturated: bool = False
    """The counter stopped at its width's maximum: the value is a floor (``≥65535``), not a count."""


@dataclass(frozen=True)
class FlapReading:
    """A port that flapped in the window of a ``counters --history`` document."""

    adapter: str
    port: int
    flaps: int
    last_flap: str | None


@dataclass(frozen=True)
class BenchFacts:
    kind: str
    """``p2p`` or ``collective``."""
    headline_gbs: float | None
    """p2p: best bw_gbs; collective: avg_busbw_gbs."""
    what: str
    """``tcp to node-b``, ``all_reduce over 16 ranks`` ..."""


@dataclass(frozen=True)
class JobFacts:
    """What an ``ibdiag job`` document says about where the job's problems are."""

    nccl_version: str | None
    nodes: tuple[str, ...]
    """The nodes of the ranks its findings name (its findings' subjects start with one of them)."""


@dataclass(frozen=True)
class InputDoc:
    path: str
    kind: str
    """``topo``, ``counters``, ``bench`` or ``sweep``."""
    host: str
    generated_at: str
    status: Severity
    findings: tuple[Finding, ...]
    """Its warn and fail findings (ok ones are checked for their severity and dropped)."""
    topo: TopoFacts | None = None
    counters: tuple[CounterReading, ...] = ()
    flaps: tuple[FlapReading, ...] = ()
    """Ports that flapped, from the document's ``history`` (``counters --history``)."""
    bench: BenchFacts | None = None
    sweep: Any = None
    """:class:`ibdiag.sweep.model.SweepResult` of a sweep document."""
    job: JobFacts | None = None


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, if it is a regular file of at most ``max_bytes``: its type is checked before it
    is opened (:func:`ibdiag.infile.read_regular`), so a FIFO or a device is never opened."""
    try:
        return read_regular(path, max_bytes)
    except RefusedFile as e:
        more = " (--max-file-size)" if "allowed" in e.problem else ""
        raise InputError(e.problem + more) from None
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror or e}") from None


def read_input(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> InputDoc | Skipped:
    """One file, checked; a :class:`Skipped` says why it cannot be used."""
    name = shown_name(path)
    try:
        raw = read_bytes(path, max_bytes)
        try:
            doc = loads(raw)
        except JsonFieldError as e:
            raise InputError(e.problem) from None
        return parse_document(doc, name)
    except InputError as e:
        return Skipped(name, e.message.removeprefix(f"{name}: "))


def parse_document(doc: Any, source: str) -> InputDoc:
    """Check an already-parsed document and extract what the fleet view uses; raises InputError."""
    r = JsonReader(source)
    if not isinstance(doc, Mapping) or "schema" not in doc:
        raise InputError("not an ibdiag JSON document (no schema)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or schema not in SCHEMAS:
        raise InputError(
            f"schema {safe_value(schema)} is not one ibdiag report reads ({', '.join(SCHEMAS)})"
        )
    kind = SCHEMAS[schema]
    host = r.text(doc.get("host"), "host", max_len=253, pattern=HOST_RE)
    generated_at = r.text(doc.get("generated_at"), "generated_at", max_len=40)
    status = Severity(r.choice(doc.get("status"), "status", _SEVERITIES))
    findings = tuple(
        f
        for i, item in enumerate(r.items(doc.get("findings"), "findings", max_items=MAX_FINDINGS))
        if (f := _finding(r, item, f"findings[{i}]")) is not None
    )
    if kind == "topo":
        return InputDoc(source, kind, host, generated_at, status, findings, topo=_topo(r, doc))
    if kind == "counters":
        return InputDoc(
            source,
            kind,
            host,
            generated_at,
            status,
            findings,
            counters=_counters(r, doc),
            flaps=_flaps(r, doc),
        )
    if kind == "bench":
        return InputDoc(source, kind, host, generated_at, status, findings, bench=_bench(r, doc))
    if kind == "job":
        return InputDoc(source, kind, host, generated_at, status, findings, job=_job(r, doc))
    return InputDoc(
        source, kind, host, generated_at, status, findings, sweep=SweepResult.from_json(doc, source)
    )


_SEVERITIES = tuple(s.value for s in Severity)


def _finding(r: JsonReader, value: Any, where: str) -> Finding | None:
    """A warn or fail finding, checked; None for an ok one (a fleet view shows only what is wrong)."""
    f = r.obj(value, where)
    severity = Severity(r.choice(f.get("severity"), f"{where}.severity", _SEVERITIES))
    if severity is Severity.OK:
        return None
    return Finding(
        check=r.text(f.get("check"), f"{where}.check", max_len=64, pattern=_CHECK_RE),
        severity=severity,
        subject=r.text(f.get("subject", ""), f"{where}.subject", max_len=600),
        message=r.text(f.get("message", ""), f"{where}.message", max_len=2000),
        value=_scalar(r, f.get("value"), f"{where}.value"),
        limit=_scalar(r, f.get("limit"), f"{where}.limit"),
        unit=r.opt_text(f.get("unit"), f"{where}.unit", max_len=32),
        hint=r.opt_text(f.get("hint"), f"{where}.hint", max_len=2000),
    )


def _scalar(r: JsonReader, value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return r.number(value, where)
    if isinstance(value, str):
        return r.text(value, where, max_len=200)
    if isinstance(value, list) and len(value) <= 64:
        return [_scalar(r, v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise r.error(where, "must be a number, a string or a short list of them")


def _topo(r: JsonReader, doc: Mapping[str, Any]) -> TopoFacts:
    gpus = r.items(doc.get("gpus"), "gpus", max_items=64)
    widths = []
    for i, g in enumerate(gpus):
        link = r.obj(r.obj(g, f"gpus[{i}]").get("link") or {}, f"gpus[{i}].link")
        widths.append(r.opt_integer(link.get("width"), f"gpus[{i}].link.width", lo=0, hi=64))
    adapters = []
    for i, a in enumerate(r.items(doc.get("adapters"), "adapters", max_items=MAX_ADAPTERS)):
        where = f"adapters[{i}]"
        a = r.obj(a, where)
        link = r.obj(a.get("link") or {}, f"{where}.link")
        ports = []
        for j, p in enumerate(r.items(a.get("ports", []), f"{where}.ports", max_items=MAX_PORTS)):
            pw = f"{where}.ports[{j}]"
            p = r.obj(p, pw)
            ports.append(
                PortFacts(
                    port=r.integer(p.get("port"), f"{pw}.port", lo=0, hi=255),
                    state=r.opt_text(p.get("state"), f"{pw}.state", max_len=32),
                    phys_state=r.opt_text(p.get("phys_state"), f"{pw}.phys_state", max_len=32),
                    rate_gbps=r.opt_number(p.get("rate_gbps"), f"{pw}.rate_gbps", lo=0, hi=1e5),
                    link_layer=r.opt_text(p.get("link_layer"), f"{pw}.link_layer", max_len=32),
                )
            )
        adapters.append(
            AdapterFacts(
                name=r.text(a.get("name"), f"{where}.name", max_len=64, pattern=ADAPTER_RE),
                fw_ver=r.opt_text(a.get("fw_ver"), f"{where}.fw_ver", max_len=64),
                board_id=r.opt_text(a.get("board_id"), f"{where}.board_id", max_len=64),
                pcie_width=r.opt_integer(link.get("width"), f"{where}.link.width", lo=0, hi=64),
                pcie_speed_gts=r.opt_number(
                    link.get("speed_gts"), f"{where}.link.speed_gts", lo=0, hi=1000
                ),
                ports=tuple(ports),
                driver_module=r.opt_text(
                    a.get("driver_module"), f"{where}.driver_module", max_len=55, pattern=_MODULE_RE
                ),
                driver_version=r.opt_text(
                    a.get("driver_version"), f"{where}.driver_version", max_len=64
                ),
                driver_version_kind=None
                if a.get("driver_version_kind") is None
                else r.choice(
                    a.get("driver_version_kind"), f"{where}.driver_version_kind", _VERSION_KINDS
                ),
            )
        )
    gdr = r.obj(doc.get("gdr") or {}, "gdr")
    nccl_env = r.obj(doc.get("nccl_env") or {}, "nccl_env")
    nccl_vars = r.obj(nccl_env.get("variables") or {}, "nccl_env.variables")
    return TopoFacts(
        gpus=len(gpus),
        gpu_pcie_widths=tuple(widths),
        adapters=tuple(adapters),
        gdr_module=r.opt_text(gdr.get("module"), "gdr.module", max_len=32),
        nvidia_driver=r.opt_text(gdr.get("nvidia_driver"), "gdr.nvidia_driver", max_len=64),
        nccl_ib_hca=r.opt_text(doc.get("nccl_ib_hca"), "nccl_ib_hca", max_len=2000),
        kernel_release=r.opt_text(
            doc.get("kernel_release"), "kernel_release", max_len=64, pattern=_KERNEL_RELEASE_RE
        ),
        nccl_gid_index=r.opt_text(
            nccl_vars.get("NCCL_IB_GID_INDEX"), "nccl_env.variables.NCCL_IB_GID_INDEX", max_len=16
        ),
    )


def _counters(r: JsonReader, doc: Mapping[str, Any]) -> tuple[CounterReading, ...]:
    mode = r.choice(doc.get("mode"), "mode", ("snapshot", "interval", "series", "since"))
    errors = _error_counters()
    out: list[CounterReading] = []
    for i, p in enumerate(r.items(doc.get("ports"), "ports", max_items=MAX_ADAPTERS * MAX_PORTS)):
        where = f"ports[{i}]"
        p = r.obj(p, where)
        adapter = r.text(p.get("adapter"), f"{where}.adapter", max_len=64, pattern=ADAPTER_RE)
        port = r.opt_integer(p.get("port"), f"{where}.port", lo=0, hi=255)
        stuck = p.get("saturated")
        saturated = {str(n) for n in stuck[:512]} if isinstance(stuck, list) else set()
        if mode == "snapshot":
            values, per_second, interval = p.get("counters"), False, None
            hw = p.get("hw_counters")
        else:
            values, per_second = p.get("rates"), True
            interval = r.opt_number(p.get("interval_s"), f"{where}.interval_s", lo=0, hi=1e9)
            hw = None  # rates hold the hw_counters' keys too
        for table, label in ((values, "rates" if per_second else "counters"), (hw, "hw_counters")):
            if table is None:
                continue
            table = r.obj(table, f"{where}.{label}")
            if len(table) > 512:
                raise r.error(f"{where}.{label}", "has more than 512 counters")
            for name, value in table.items():
                if value is None:
                    continue
                key = r.text(name, f"{where}.{label} key", max_len=64, pattern=_COUNTER_RE)
                number = r.number(value, f"{where}.{label}.{key}", lo=0)
                if key in errors and number > 0:
                    out.append(
                        CounterReading(
                            adapter, port, key, number, per_second, interval, key in saturated
                        )
                    )
    return tuple(out)


def _flaps(r: JsonReader, doc: Mapping[str, Any]) -> tuple[FlapReading, ...]:
    """The flapped ports of a document's ``history`` (absent without ``--history``)."""
    key = (
        "history"  # the key ``counters --history`` adds (ibdiag.history.run.HistoryResult.to_json)
    )
    if doc.get(key) is None:
        return ()
    history = r.obj(doc[key], key)
    out = []
    items = r.items(history.get("ports"), f"{key}.ports", max_items=MAX_ADAPTERS * MAX_PORTS)
    for i, p in enumerate(items):
        where = f"{key}.ports[{i}]"
        p = r.obj(p, where)
        flaps = r.integer(p.get("flaps"), f"{where}.flaps", lo=0, hi=10**9)
        if flaps:
            out.append(
                FlapReading(
                    r.text(p.get("adapter"), f"{where}.adapter", max_len=64, pattern=ADAPTER_RE),
                    r.integer(p.get("port"), f"{where}.port", lo=0, hi=255),
                    flaps,
                    r.opt_text(p.get("last_flap"), f"{where}.last_flap", max_len=40),
                )
            )
    return tuple(out)


def _bench(r: JsonReader, doc: Mapping[str, Any]) -> BenchFacts:
    kind = r.choice(doc.get("kind"), "kind", ("p2p", "collective"))
    if kind == "p2p":
        best = None
        for i, res in enumerate(r.items(doc.get("results", []), "results", max_items=4096)):
            bw = r.opt_number(
                r.obj(res, f"results[{i}]").get("bw_gbs"), f"results[{i}].bw_gbs", lo=0, hi=1e5
            )
            if bw is not None and (best is None or bw > best):
                best = bw
        transport = r.opt_text(doc.get("transport"), "transport", max_len=16) or "?"
        peer = r.opt_text(doc.get("peer"), "peer", max_len=253) or "?"
        return BenchFacts(kind, best, f"p2p {transport} to {peer}")
    op = r.opt_text(doc.get("op"), "op", max_len=32) or "collective"
    world = r.opt_integer(doc.get("world_size"), "world_size", lo=0, hi=1 << 24)
    return BenchFacts(
        kind,
        r.opt_number(doc.get("avg_busbw_gbs"), "avg_busbw_gbs", lo=0, hi=1e6),
        f"{op} over {world if world is not None else '?'} ranks",
    )


def _job(r: JsonReader, doc: Mapping[str, Any]) -> JobFacts:
    ras = r.obj(doc.get("ras") or {}, "ras")
    nodes: dict[str, None] = {}
    for i, row in enumerate(r.items(doc.get("ranks") or [], "ranks", max_items=1 << 20)):
        node = r.obj(row, f"ranks[{i}]").get("node")
        if node is not None:
            nodes.setdefault(r.text(node, f"ranks[{i}].node", max_len=253, pattern=HOST_RE), None)
    return JobFacts(
        r.opt_text(ras.get("nccl_version"), "ras.nccl_version", max_len=64), tuple(nodes)
    )


def read_all(
    args: Sequence[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[list[InputDoc], list[Skipped]]:
    """Every file ``args`` name, read and checked; raises :class:`InputError` (exit 2) when none is usable."""
    if not args:
        raise InputError(
            "no input: give directories, files or patterns of ibdiag JSON",
            hint="e.g. ibdiag report /shared/ibdiag/*.json",
        )
    files, skipped = find_files(args)
    docs: list[InputDoc] = []
    for path in files:
        got = read_input(path, max_bytes=max_bytes)
        (docs if isinstance(got, InputDoc) else skipped).append(got)  # type: ignore[arg-type]  # each list gets its own kind
    if not docs:
        shown = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) or "no .json file found"
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        raise InputError(
            f"nothing readable among the inputs: {shown}{more}",
            hint="give the JSON files ibdiag wrote on each node (ibdiag topo -o json > $(hostname).topo.json, ...)",
        )
    return docs, skipped
