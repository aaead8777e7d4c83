"""perftest's ``--out_json`` files -> :class:`BenchRun` (``kind: p2p``).

The file has objects with ``MsgSize``, ``n_iterations``, ``BW_peak``, ``BW_average``, ``MsgRate``
(FORMATS.md) and a ``test_info`` object; some perftest versions write bare words unquoted and leave
trailing commas, which are repaired before reading. The file does not say the bandwidth unit; it is
told from the numbers: MsgRate x 1e6 x MsgSize is the rate in B/s, so BW_average matches it either as
MiB/s or as Gb/s (else MiB/s is assumed, and the run says so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ibdiag.bench.importers.lines import number
from ibdiag.bench.importers.perftest import GBIT, HINT, MIB, verb_of
from ibdiag.bench.results.model import BenchRun, P2PResult
from ibdiag.bench.results.p2p_meta import P2PMeta, PerftestLog
from ibdiag.bench.results.provenance import ImportInfo, Provenance
from ibdiag.errors import InputError
from ibdiag.jsonread import JsonFieldError, loads

#: A bare key (``{MsgSize: 65536``): words of a name, one space between them, then the colon. No
#: part overlaps the next, so each try costs a bounded number of steps and the repair is linear.
_BARE_KEY = re.compile(
    r"([{,][ \t\r\n]{0,64})([A-Za-z_][\w.\-]{0,63}(?: [\w.\-]{1,63}){0,7})[ \t]{0,64}:"
)
#: A bare value (``: RDMA_Write,``), up to the comma or bracket after it (spaces after it are taken
#: into it and stripped by :func:`_quote`); no colon or bracket inside, so a try stops at the next.
_BARE_VALUE = re.compile(r":[ \t]{0,64}([A-Za-z_][^,:{}\[\]\n\"]{0,255})(?=[,}\]\n])")
_TRAILING_COMMA = re.compile(r",[ \t\r\n]{0,256}([}\]])")


def _quote(m: re.Match[str]) -> str:
    word = m.group(1).strip()
    return m.group(0) if word in ("true", "false", "null") else f': "{word}"'


def load_json_text(text: str, source: str) -> Any:
    """JSON, or perftest's not-quite-JSON (bare words, trailing commas) repaired first."""
    try:
        return loads(text)
    except JsonFieldError as first:
        if not first.problem.startswith("not JSON"):  # beyond the budget: no repair helps
            raise InputError(f"{source}: {first.problem}", hint=HINT) from None
        repaired = _BARE_KEY.sub(r'\1"\2":', text)
        repaired = _BARE_VALUE.sub(_quote, repaired)
        repaired = _TRAILING_COMMA.sub(r"\1", repaired)
        try:
            return loads(repaired)
        except JsonFieldError:
            raise InputError(f"{source}: {first.problem}", hint=HINT) from None


def _result_objects(doc: Any) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    if isinstance(doc, Mapping):
        if "MsgSize" in doc:
            return [doc]
        for v in doc.values():
            found += _result_objects(v)
    elif isinstance(doc, list):
        for v in doc:
            found += _result_objects(v)
    return found


def is_json_doc(doc: Any) -> bool:
    return bool(_result_objects(doc))


def _infer_scale(objs: list[Mapping[str, Any]], info: Mapping[str, Any]) -> tuple[float, str, bool]:
    """(B/s per unit, unit, assumed?) from MsgRate x MsgSize, else from a unit named in the file."""
    votes: list[str] = []
    for o in objs:
        try:
            rate, size, avg = (
                float(o.get("MsgRate") or 0),
                float(o["MsgSize"]),
                float(o.get("BW_average") or 0),
            )
        except (TypeError, ValueError):
            continue
        if rate <= 0 or avg <= 0 or size <= 0:
            continue
        bps = rate * 1e6 * size
        for unit, scale in (("MiB/sec", MIB), ("Gb/sec", GBIT)):
            if abs(avg * scale / bps - 1) < 0.1:
                votes.append(unit)
    if votes:
        unit = max(set(votes), key=votes.count)
        return (MIB if unit == "MiB/sec" else GBIT), unit, False
    text = json.dumps(info).lower()
    if "gb/sec" in text or "gbit" in text:
        return GBIT, "Gb/sec", False
    return MIB, "MiB/sec", True


def parse_doc(
    doc: Any, source: str, *, op: str | None = None, file_name: str | None = None
) -> BenchRun:
    """The runs' rows and what ``test_info`` says (``op``, ``file_name``: the importers' common arguments, unused)."""
    objs = _result_objects(doc)
    if not objs:
        raise InputError(f"{source}: a JSON file without perftest results (MsgSize)", hint=HINT)
    info = (
        got if isinstance(doc, Mapping) and isinstance(got := doc.get("test_info"), Mapping) else {}
    )
    scale, unit, assumed = _infer_scale(objs, info)
    results = []
    for i, o in enumerate(objs):
        where = f"{source}: result {i + 1}"
        if "BW_average" not in o:
            raise InputError(f"{where} is malformed (no BW_average)", hint=HINT)
        peak = number(o.get("BW_peak") or 0, where, "BW_peak", HINT)
        results.append(
            P2PResult(
                bytes=int(number(o["MsgSize"], where, "MsgSize", HINT)),
                iters=int(number(o.get("n_iterations") or 0, where, "n_iterations", HINT)),
                bw_gbs=number(o["BW_average"], where, "BW_average", HINT) * scale / 1e9,
                bw_peak_gbs=None if peak == 0 else peak * scale / 1e9,
                msg_rate_mpps=None
                if o.get("MsgRate") is None
                else number(o["MsgRate"], where, "MsgRate", HINT),
            )
        )
    title = str(info.get("test") or "")[:200]
    low = {str(k).lower(): v for k, v in info.items()}
    log = PerftestLog(
        test=f"ib_{verb_of(title) or 'unknown'}_bw",
        title=title or None,
        verb=verb_of(title),
        device=_text(low.get("device")),
        link_layer=_text(low.get("link_type")),
        bw_unit=unit,
        bw_unit_assumed=assumed,
        peak_measured=all(r.bw_peak_gbs is not None for r in results),
    )
    imported = ImportInfo(tool="perftest", source=source, format="out_json")
    return BenchRun(
        P2PMeta(transport="rdma", mode="bw", bidir="bidirectional" in title.lower(), perftest=log),
        tuple(results),
        Provenance(imported=imported),
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:200]
