"""``--since before.json``: read back a saved ``ibdiag counters -o json`` as the baseline sample.

The file must be an ``ibdiag.counters/1`` document from the same host (counters are per node:
comparing with another node's baseline gives nonsense deltas) with well-formed ``ports``. Every value
is checked against what ibdiag writes and the kernel can count: counters within their width (a
baseline of 10^30 would read as a reset), fields of the right type, times not in the future. Anything
else is an :class:`InputError` (exit 2) that says what is wrong.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, overload

from ibdiag.counters.model import PortCounters, Sample
from ibdiag.counters.spec import BYTES_PER_DATA_WORD, DATA_BYTES, max_value, width_bits
from ibdiag.errors import InputError
from ibdiag.node.model import Port
from ibdiag.output.jsonout import load_envelope
from ibdiag.parse import MAX_IB_RATE_GBPS
from ibdiag.text import is_printable, safe_value

SCHEMA = "ibdiag.counters/1"
_HINT = "save a baseline on this node with `ibdiag counters -o json > before.json` before the job"
#: How far in the future a baseline's time may be (clocks of a node drift; NTP keeps them within ms).
CLOCK_SKEW_S = 300.0
#: Longest name or text field ibdiag writes in a baseline (adapter names are at most 64, IB_DEVICE_NAME_MAX).
MAX_TEXT = 256


def _bad(path: Path, what: str) -> InputError:
    return InputError(f"{path}: malformed counters baseline: {what}", hint=_HINT)


@overload
def _text(path: Path, where: str, value: Any, *, optional: Literal[False]) -> str: ...
@overload
def _text(path: Path, where: str, value: Any, *, optional: bool = ...) -> str | None: ...
def _text(path: Path, where: str, value: Any, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not is_printable(value):
        raise _bad(path, f"{where} is {safe_value(value)}, not a name")
    return value


def _count(path: Path, where: str, value: Any, bits: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(path, f"{where} is {safe_value(value)}, not a count")
    if value > max_value(bits):
        raise _bad(
            path, f"{where} is {safe_value(value)}, more than its {bits}-bit counter can hold"
        )
    return value


def _counter_map(
    path: Path, where: str, value: Any, width: Callable[[str], int]
) -> dict[str, int | None] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(path, f"{where} is not an object")
    out: dict[str, int | None] = {}
    for k, v in value.items():
        name = _text(path, f"{where} key", k, optional=False)
        out[name] = _count(path, f"{where}.{name}", v, width(name))
    return out


def _port_info(path: Path, where: str, doc: Mapping[str, Any], adapter: str, port: int) -> Port:
    """The port's state, physical state, rate and link layer as the baseline recorded them."""
    rate = doc.get("rate_gbps")
    if rate is not None and (
        isinstance(rate, bool)
        or not isinstance(rate, (int, float))
        or not math.isfinite(rate)
        or not 0 < rate <= MAX_IB_RATE_GBPS
    ):
        raise _bad(path, f"{where}.rate_gbps is {safe_value(rate)}, not a port rate")
    return Port(
        adapter=adapter,
        port=port,
        state=_text(path, f"{where}.state", doc.get("state")),
        state_code=None,
        phys_state=_text(path, f"{where}.phys_state", doc.get("phys_state")),
        phys_state_code=None,
        rate_gbps=None if rate is None else float(rate),
        lanes=None,
        lane_speed=None,
        link_layer=_text(path, f"{where}.link_layer", doc.get("link_layer")),
        lid=None,
        sm_lid=None,
        netdev=None,
    )


def _port(path: Path, i: int, doc: Any, *, device: bool) -> PortCounters:
    where = f"{'device_counters' if device else 'ports'}[{i}]"
    if not isinstance(doc, Mapping):
        raise _bad(path, f"{where} is not an object")
    adapter = doc.get("adapter")
    if not isinstance(adapter, str) or not adapter:
        raise _bad(path, f"{where}.adapter is missing")
    _text(path, f"{where}.adapter", adapter, optional=False)
    port = None
    if not device:
        port = doc.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 2**32 - 1:
            raise _bad(path, f"{where}.port is {safe_value(port)}, not a port number")
    bits = doc.get("data_counter_bits") or 64
    if bits not in (32, 64):
        raise _bad(path, f"{where}.data_counter_bits is {safe_value(bits)}")
    counters = _counter_map(
        path,
        f"{where}.counters",
        doc.get("counters"),
        lambda name: width_bits(name, data_bits=bits) or 64,
    )
    hw = _counter_map(
        path, f"{where}.hw_counters", doc.get("hw_counters"), lambda name: 64
    )  # rdma_hw_stats values are u64
    saturated = doc.get("saturated", [])
    if not isinstance(saturated, list) or not all(
        isinstance(s, str) and is_printable(s) and len(s) <= MAX_TEXT for s in saturated
    ):
        raise _bad(path, f"{where}.saturated is not a list of counter names")
    derived: dict[str, int | None] = {}
    for _src, key in DATA_BYTES.items():
        v = doc.get(key)
        if v is not None and (
            isinstance(v, bool)
            or not isinstance(v, int)
            or not 0 <= v <= max_value(bits) * BYTES_PER_DATA_WORD
        ):
            raise _bad(
                path,
                f"{where}.{key} is {safe_value(v)}, not a byte count its {bits}-bit counter can give",
            )
        derived[key] = v
    for key in ("hw_counters_lifespan_ms",):
        _count(path, f"{where}.{key}", doc.get(key), 64)
    info = None if device else _port_info(path, where, doc, adapter, port)  # type: ignore[arg-type]  # port is an int when not device: read and checked above
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


def _when(path: Path, key: str, value: Any, now: float) -> float:
    """Epoch seconds of the ISO 8601 time ``value``; refused when malformed or in the future."""
    if not isinstance(value, str) or len(value) > 64:
        raise _bad(path, f"{key} is {safe_value(value)}, not a time")
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _bad(path, f"{key} is {safe_value(value)}, not an ISO 8601 time") from None
    if stamp.tzinfo is None:
        raise _bad(path, f"{key} is {safe_value(value)}, without a time zone")
    epoch_s = stamp.timestamp()
    if epoch_s > now + CLOCK_SKEW_S:
        raise InputError(
            f"{path}: the baseline's {key} {safe_value(value)} is in the future ({epoch_s - now:+.0f} s from now)",
            hint="a baseline is saved before the job on this node: check this node's clock (timedatectl) and the file",
        )
    return epoch_s


def load_baseline(
    path: Path | str, *, host: str, now: float | None = None
) -> tuple[Sample, dict[str, Any]]:
    """The baseline sample and ``{"file", "host", "generated_at", "sampled_at"}`` to report it by.

    ``now`` (epoch seconds, default this node's clock): times later than it plus :data:`CLOCK_SKEW_S`
    are refused."""
    now = time.time() if now is None else now
    p = Path(path)
    doc = load_envelope(p, schema=SCHEMA)
    their_host = doc.get("host")
    if their_host != host:
        raise InputError(
            f"{p} was written on host {safe_value(their_host)}, this is {safe_value(host)}",
            hint="counters are per node: compare with a baseline saved on this node (`ibdiag counters -o json > before.json`)",
        )
    taken = doc.get("sampled_at_epoch_s")
    if (
        isinstance(taken, bool)
        or not isinstance(taken, (int, float))
        or not math.isfinite(taken)
        or taken <= 0
    ):
        raise _bad(p, "sampled_at_epoch_s is missing")
    # A sampled_at_epoch_s later than this reading is refused where the interval is computed (delta.py).
    if "generated_at" in doc:
        _when(p, "generated_at", doc["generated_at"], now)
    if doc.get("sampled_at") is not None:
        _when(p, "sampled_at", doc["sampled_at"], now)
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
    meta = {
        "file": str(p),
        "host": their_host,
        "generated_at": doc.get("generated_at"),
        "sampled_at": doc.get("sampled_at"),
    }
    return Sample(taken_at_s=float(taken), monotonic_s=None, ports=tuple(records)), meta


def check_comparable(path: Path | str, before: Sample, now: Sample) -> None:
    """Refuse a baseline that cannot stand for a port's error counters now: it has the port, but
    without counters (``"counters": null``, which ibdiag writes when counters/ was missing), while the
    port has them now — every error since then would pass unseen. A port missing from the baseline
    altogether is the ``counters.baseline`` warning's to report."""
    for p in now.ports:
        then = before.port(p.key)
        if then is not None and then.counters is None and p.counters is not None:
            raise InputError(
                f"{path}: the baseline has no counters for {p.subject} (its counters/ directory was missing when it was saved), "
                "this reading has them: its errors since then cannot be counted",
                hint=_HINT,
            )
