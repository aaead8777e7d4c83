"""nccl-tests' ``-J FILE`` JSON output -> :class:`BenchRun` (``kind: collective``).

The file (nccl-tests ``src/common.cu``, JSON format version 2): ``version``, ``args`` (the command line:
``args[0]`` names the binary), ``nccl_version``, ``config`` (parameters and ``devices``, one per rank:
rank, group, pid, hostname, device, device_hex, device_info), ``results`` (size, count, type, redop,
root, and ``out_of_place``/``in_place`` with time, alg_bw, bus_bw, nwrong), ``out_of_bounds``,
``average_bus_bandwidth``, ``errors``, ``end_time``. Every value is checked as it is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ibdiag.bench.importers.lines import number
from ibdiag.bench.importers.nccl_tests import HINT
from ibdiag.bench.importers.nccl_tests_run import choose_op, collective_meta
from ibdiag.bench.results.collective_meta import NcclRank, NcclTestsLog
from ibdiag.bench.results.model import BenchRun, CollectiveResult
from ibdiag.bench.results.provenance import ImportInfo, Provenance
from ibdiag.collectives import op_in_text
from ibdiag.errors import InputError
from ibdiag.jsonread import Fields


def is_json_doc(doc: Any) -> bool:
    return (
        isinstance(doc, Mapping)
        and isinstance(doc.get("results"), list)
        and ("config" in doc or "nccl_version" in doc)
    )


def parse_doc(
    doc: Mapping[str, Any], source: str, *, op: str | None = None, file_name: str | None = None
) -> BenchRun:
    """nccl-tests' ``-J FILE`` output: ``{"version", "args", "config": {..., "devices": [...]}, "results": [...]}``."""
    results = _json_results(doc, source)
    ranks, params = _json_config(doc, source)
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    binary = str(args[0]).rsplit("/", 1)[-1] if args else None
    choice = choose_op(
        op_in_text(binary) if binary else None, op, file_name, results, len(ranks) or None
    )
    avg_doc = got if isinstance(got := doc.get("average_bus_bandwidth"), Mapping) else {}
    oob_doc = got if isinstance(got := doc.get("out_of_bounds"), Mapping) else {}
    reported = avg_doc.get("bandwidth")
    oob = oob_doc.get("count")
    log = NcclTestsLog(
        op_source=choice.source,
        op_candidates=choice.candidates,
        gpus=tuple(sorted({str(r.gpu) for r in ranks if r.gpu})),
        ranks=tuple(ranks),
        params=params,
        avg_busbw_gbs_reported=float(reported)
        if isinstance(reported, (int, float))
        and not isinstance(reported, bool)
        and math.isfinite(reported)
        else None,
        out_of_bounds=oob
        if isinstance(oob, int) and not isinstance(oob, bool) and oob >= 0
        else None,
        complete="end_time" in doc,
    )
    errors = got if isinstance(got := doc.get("errors"), list) else []
    provenance = Provenance(
        imported=ImportInfo(tool="nccl-tests", source=source, format=f"json v{doc.get('version')}"),
        nccl_version=None
        if doc.get("nccl_version") is None
        else str(doc.get("nccl_version"))[:100],
        nccl_errors=tuple(str(e)[:300] for e in errors),
    )
    return BenchRun(collective_meta(results, ranks, choice, log, None), tuple(results), provenance)


def _json_results(doc: Mapping[str, Any], source: str) -> list[CollectiveResult]:
    """``results``: one row per size and placement (``out_of_place``, ``in_place``)."""
    results: list[CollectiveResult] = []
    for i, row in enumerate(doc.get("results") or []):
        if not isinstance(row, Mapping):
            raise InputError(f"{source}: results[{i}] is not an object", hint=HINT)
        where = f"{source}: results[{i}]"
        try:
            size, count = int(row["size"]), int(row["count"])
            root_raw = row.get("root")
            root = (
                int(str(root_raw).strip()) if root_raw is not None and str(root_raw).strip() else -1
            )
            redop = row.get("redop")
            redop = None if redop in (None, "none") else str(redop)
            for key, in_place in (("out_of_place", False), ("in_place", True)):
                half = row.get(key)
                if not isinstance(half, Mapping):
                    continue
                t = half.get("time", half.get("cpu_time"))
                nw = half.get("nwrong")
                results.append(
                    CollectiveResult(
                        bytes=size,
                        count=count,
                        dtype=str(row.get("type", "")),
                        redop=redop,
                        root=root if root >= 0 else None,
                        in_place=in_place,
                        time_us=number(t, where, "time", HINT),
                        algbw_gbs=number(half["alg_bw"], where, "alg_bw", HINT),
                        busbw_gbs=number(half["bus_bw"], where, "bus_bw", HINT),
                        wrong=None
                        if nw in (None, "nan")
                        else int(number(nw, where, "nwrong", HINT)),
                    )
                )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{source}: results[{i}] is malformed ({e})", hint=HINT) from None
    return results


def _json_config(doc: Mapping[str, Any], source: str) -> tuple[list[NcclRank], dict[str, Any]]:
    """``config``: the ranks (its ``devices``) and its scalar parameters."""
    cfg = got if isinstance(got := doc.get("config"), Mapping) else {}
    devices = got if isinstance(got := cfg.get("devices"), list) else []
    try:
        ranks = [
            _json_rank(Fields(d, f"config.devices[{i}]"))
            for i, d in enumerate(devices)
            if isinstance(d, Mapping)
        ]
        params = Fields(
            {
                "config": {
                    k: v
                    for k, v in cfg.items()
                    if k != "devices" and not isinstance(v, (list, dict))
                }
            },
            "",
        ).scalars("config")
    except ValueError as e:
        raise InputError(f"{source}: {e}", hint=HINT) from None
    return ranks, params


def _json_rank(f: Fields) -> NcclRank:
    """One of ``-J``'s ``config.devices``: rank, group, pid, hostname, device, device_hex, device_info."""
    return NcclRank(
        rank=f.integer("rank", 0, 1 << 24),
        group=f.integer("group", 0, 1 << 24),
        pid=f.integer("pid", 0, 2**31),
        host=f.text("hostname"),
        device=f.integer("device", 0, 1 << 16),
        bus_id=f.text("device_hex"),
        gpu=f.text("device_info"),
    )
