"""``--since before.json``: read back a saved ``ibdiag counters -o json`` as the baseline sample.

The file must be an ``ibdiag.counters/1`` document from the same host (counters are per node:
comparing with another node's baseline gives nonsense deltas) with well-formed ``ports``. Anything
else is an :class:`InputError` (exit 2) that says what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ibdiag.counters.model import PortCounters, Sample
from ibdiag.counters.spec import DATA_BYTES
from ibdiag.errors import InputError
from ibdiag.topo.model import Port

SCHEMA = "ibdiag.counters/1"
_HINT = "save a baseline on this node with `ibdiag counters -o json > before.json` before the job"


def _bad(path: Path, what: str) -> InputError:
    return InputError(f"{path}: malformed counters baseline: {what}", hint=_HINT)


def _counter_map(path: Path, where: str, value: Any) -> dict[str, int | None] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(path, f"{where} is not an object")
    out: dict[str, int | None] = {}
    for k, v in value.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise _bad(path, f"{where}.{k} is {v!r}, not a count")
        out[str(k)] = v
    return out


def _port(path: Path, i: int, doc: Any, *, device: bool) -> PortCounters:
    where = f"{'device_counters' if device else 'ports'}[{i}]"
    if not isinstance(doc, Mapping):
        raise _bad(path, f"{where} is not an object")
    adapter = doc.get("adapter")
    if not isinstance(adapter, str) or not adapter:
        raise _bad(path, f"{where}.adapter is missing")
    port = None
    if not device:
        port = doc.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or port < 0:
            raise _bad(path, f"{where}.port is {port!r}, not a port number")
    counters = _counter_map(path, f"{where}.counters", doc.get("counters"))
    hw = _counter_map(path, f"{where}.hw_counters", doc.get("hw_counters"))
    saturated = doc.get("saturated", [])
    if not isinstance(saturated, list) or not all(isinstance(s, str) for s in saturated):
        raise _bad(path, f"{where}.saturated is not a list of counter names")
    bits = doc.get("data_counter_bits") or 64
    if bits not in (32, 64):
        raise _bad(path, f"{where}.data_counter_bits is {bits!r}")
    derived: dict[str, int | None] = {}
    for src, key in DATA_BYTES.items():
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise _bad(path, f"{where}.{key} is {v!r}, not a byte count")
        derived[key] = v
    info = None
    if not device:
        info = Port(
            adapter=adapter,
            port=port,  # type: ignore[arg-type]
            state=doc.get("state"),
            state_code=None,
            phys_state=doc.get("phys_state"),
            phys_state_code=None,
            rate_gbps=doc.get("rate_gbps") if isinstance(doc.get("rate_gbps"), (int, float)) else None,
            lanes=None,
            lane_speed=None,
            link_layer=doc.get("link_layer"),
            lid=None,
            sm_lid=None,
            netdev=None,
        )
    return PortCounters(
        adapter=adapter,
        port=port,
        info=info,
        counters=counters,
        hw_counters=hw,
        unavailable={},
        saturated=frozenset(saturated),
        data_bits=bits,
        xmit_bytes=derived["xmit_bytes"],
        rcv_bytes=derived["rcv_bytes"],
    )


def load_baseline(path: Path | str, *, host: str) -> tuple[Sample, dict[str, Any]]:
    """The baseline sample and ``{"file", "host", "generated_at", "sampled_at"}`` to report it by."""
    from ibdiag.report.jsonout import load_envelope

    p = Path(path)
    doc = load_envelope(p, schema=SCHEMA)
    their_host = doc.get("host")
    if their_host != host:
        raise InputError(
            f"{p} was written on host {their_host!r}, this is {host!r}",
            hint="counters are per node: compare with a baseline saved on this node (`ibdiag counters -o json > before.json`)",
        )
    taken = doc.get("sampled_at_epoch_s")
    if isinstance(taken, bool) or not isinstance(taken, (int, float)) or taken <= 0:
        raise _bad(p, "sampled_at_epoch_s is missing")
    ports = doc.get("ports")
    if not isinstance(ports, list):
        raise _bad(p, "no ports list")
    devices = doc.get("device_counters", [])
    if not isinstance(devices, list):
        raise _bad(p, "device_counters is not a list")
    records = [_port(p, i, d, device=False) for i, d in enumerate(ports)]
    records += [_port(p, i, d, device=True) for i, d in enumerate(devices)]
    seen = set()
    for r in records:
        if r.key in seen:
            raise _bad(p, f"{r.subject} appears twice")
        seen.add(r.key)
    meta = {"file": str(p), "host": their_host, "generated_at": doc.get("generated_at"), "sampled_at": doc.get("sampled_at")}
    return Sample(taken_at_s=float(taken), monotonic_s=None, ports=tuple(records)), meta
