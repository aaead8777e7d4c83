"""The port history -> findings: did a port flap, has it recovered, did its errors burst?

Check ids (one finding per check and port, subject ``mlx5_0:1``):

* ``history.flaps``      flaps in the window (``[history] window_hours``, 24 h): ``flaps_fail`` (2) or
  more fail, ``flaps_warn`` (1) or more warn, none is OK. Not emitted for a recovered port.
* ``history.recovered``  the port flapped in the window, is ACTIVE now and has not flapped for
  ``recovery_hours`` (4 h): OK, with when it last flapped, so a health check returns the node to service
* ``history.errors``     IBA error counters rose above their ``[counters.thresholds]`` between two
  records (a burst) in the window: warn, with the counters and the time of the last burst
* ``history.aer``        PCIe AER errors counted between records in the window, on a GPU, an RDMA NIC
  or a bridge between them: uncorrectable (non-fatal or fatal) fail; correctable at least
  ``aer_correctable_warn`` on a GPU-NIC path warn (they precede the link's downtraining), elsewhere ok
* ``history.aer_total``  AER errors since boot (absolute, this run's reading): uncorrectable warn (when
  is unknown), correctable ok with the count; devices with none are not listed
* ``history.records``    the store itself: how many records the window had; records that could not be
  read (malformed, another host's) warn
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.history.aer import AerStory
from ibdiag.history.config import HistoryConfig
from ibdiag.history.devices import Device, DeviceMap
from ibdiag.history.model import PortStory
from ibdiag.history.store import Loaded
from ibdiag.units import format_duration

CHECKS = CheckRegistry("history")


def when(epoch_s: float) -> str:
    """``2026-12-03T10:05:00Z``."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def recovered_port(s: PortStory, cfg: HistoryConfig, now_s: float) -> bool:
    last = s.last_flap_s
    return last is not None and bool(s.up_now) and now_s - last >= cfg.recovery_s


def _how(s: PortStory) -> str:
    shown = [f"{when(f.at_s)} {f.how}" for f in s.flaps[-3:]]
    more = f" and {len(s.flaps) - 3} earlier" if len(s.flaps) > 3 else ""
    return "; ".join(shown) + more


@CHECKS.check("history.flaps", "flaps in the window: flaps_fail (2 in 24 h) fail, flaps_warn warn")
def flaps(s: PortStory, cfg: HistoryConfig, now_s: float) -> Finding | None:
    window = format_duration(cfg.window_s)
    n = s.flap_count
    if recovered_port(s, cfg, now_s):
        return None
    if n == 0:
        extra = (
            f"; {s.unknown_steps} step(s) with link_downed not comparable (saturated or unavailable)"
            if s.unknown_steps
            else ""
        )
        return Finding(
            "history.flaps",
            Severity.OK,
            s.subject,
            f"no flap in the last {window} ({s.records} record(s)){extra}",
            value=0,
            limit=cfg.flaps_fail,
        )
    severity = (
        Severity.FAIL
        if n >= cfg.flaps_fail
        else Severity.WARN
        if n >= cfg.flaps_warn
        else Severity.OK
    )
    state = "" if s.up_now else " and it is not ACTIVE now"
    stable = format_duration(max(0.0, now_s - (s.last_flap_s or now_s)))
    return Finding(
        "history.flaps",
        severity,
        s.subject,
        f"link flapped {n} time(s) in the last {window}{state}, last at {when(s.last_flap_s or now_s)} ({stable} ago): {_how(s)}",
        value=n,
        limit=cfg.flaps_fail,
        hint=f"a link that retrains is a marginal cable, transceiver or switch port: check `mlxlink -d {s.adapter} -p {s.port} -m` and the switch end; "
        f"the port counts as recovered after {format_duration(cfg.recovery_s)} without a flap",
    )


@CHECKS.check(
    "history.recovered",
    "a port that flapped in the window and has been stable for recovery_hours: OK",
)
def recovered(s: PortStory, cfg: HistoryConfig, now_s: float) -> Finding | None:
    if not recovered_port(s, cfg, now_s):
        return None
    last = s.last_flap_s or now_s
    return Finding(
        "history.recovered",
        Severity.OK,
        s.subject,
        f"recovered: flapped {s.flap_count} time(s) in the last {format_duration(cfg.window_s)}, last at {when(last)}, "
        f"stable and ACTIVE since ({format_duration(now_s - last)}, recovery window {format_duration(cfg.recovery_s)})",
        value=s.flap_count,
    )


@CHECKS.check(
    "history.errors",
    "error counters rose above their thresholds between two records (a burst): warn",
)
def errors(s: PortStory, cfg: HistoryConfig) -> Finding | None:
    if not s.bursts:
        return None
    last = s.bursts[-1]
    counts = ", ".join(f"{k} +{v}" for k, v in sorted(last.counts.items()))
    return Finding(
        "history.errors",
        Severity.WARN,
        s.subject,
        f"{len(s.bursts)} error burst(s) in the last {format_duration(cfg.window_s)}, last at {when(last.at_s)}: {counts}",
        value=len(s.bursts),
        hint="error bursts between runs are a link degrading: watch it with `ibdiag counters --interval 10`",
    )


@CHECKS.check(
    "history.records", "the history store: records in the window; unreadable records warn"
)
def records(loaded: Loaded, cfg: HistoryConfig, directory: str) -> Finding:
    n = len(loaded.records)
    span = ""
    if n >= 2:
        span = (
            f" over {format_duration(loaded.records[-1].taken_at_s - loaded.records[0].taken_at_s)}"
        )
    if loaded.skipped:
        return Finding(
            "history.records",
            Severity.WARN,
            directory,
            f"{n} earlier record(s){span}; {len(loaded.skipped)} skipped: {loaded.skipped[0]}",
            value=len(loaded.skipped),
            hint="a record from another host or a damaged file: move it out of the store",
        )
    note = "" if n else "; this is the first: flaps are counted from the next record on"
    return Finding(
        "history.records", Severity.OK, directory, f"{n} earlier record(s){span}{note}", value=n
    )


def check_history(
    stories: Sequence[PortStory],
    loaded: Loaded,
    cfg: HistoryConfig,
    *,
    now_s: float,
    directory: str,
) -> list[Finding]:
    """Every history finding: the store, then per port flaps, recovery and error bursts."""
    out = list(records(loaded, cfg, directory))
    for s in stories:
        out += flaps(s, cfg, now_s)
        out += recovered(s, cfg, now_s)
        out += errors(s, cfg)
    return out


_AER_HINT = (
    "PCIe errors on the path between a GPU and its NIC: reseat the card and riser, check the slot and "
    "BIOS PCIe settings; `ibdiag topo` shows the trained width and speed"
)


def on_gpu_nic_path(dev: Device) -> bool:
    """A NIC that serves a GPU, a GPU with a NIC, or a bridge above both."""
    if dev.role == "bridge":
        return any(s.startswith("GPU") for s in dev.serves) and any(
            not s.startswith("GPU") for s in dev.serves
        )
    return bool(dev.serves)


def _bits(s: AerStory) -> str:
    return ", ".join(f"{k} +{v}" for k, v in sorted(s.bits.items(), key=lambda kv: -kv[1])[:5])


@CHECKS.check(
    "history.aer",
    "AER errors between records: uncorrectable fail, correctable bursts on a GPU-NIC path warn",
)
def aer_window(s: AerStory, dev: Device, cfg: HistoryConfig) -> Finding | None:
    if not s.increase:
        return None
    cor = s.increase.get("correctable", 0)
    uncor = s.increase.get("nonfatal", 0) + s.increase.get("fatal", 0)
    path = on_gpu_nic_path(dev)
    if uncor:
        severity = Severity.FAIL
    elif cor >= cfg.aer_correctable_warn and path:
        severity = Severity.WARN
    else:
        severity = Severity.OK
    where = "on a GPU-NIC path" if path else "not between a GPU and a NIC"
    return Finding(
        "history.aer",
        severity,
        dev.subject,
        f"{dev.said()}: {cor} correctable, {uncor} uncorrectable PCIe error(s) in the last {format_duration(cfg.window_s)} "
        f"({where}), last at {when(s.last_s or 0)}: {_bits(s)}",
        value=cor + uncor,
        limit=cfg.aer_correctable_warn,
        hint=_AER_HINT if severity is not Severity.OK else None,
    )


@CHECKS.check(
    "history.aer_total", "AER errors since boot: uncorrectable warn, correctable ok with the count"
)
def aer_total(s: AerStory, dev: Device) -> Finding | None:
    if s.now is None:
        return None
    cor = s.now.total("correctable") or 0
    uncor = (s.now.total("nonfatal") or 0) + (s.now.total("fatal") or 0)
    if not cor and not uncor:
        return None
    return Finding(
        "history.aer_total",
        Severity.WARN if uncor else Severity.OK,
        dev.subject,
        f"{dev.said()}: {cor} correctable, {uncor} uncorrectable PCIe error(s) since boot (aer_dev_*; when is unknown: "
        "the history's records time the increases)",
        value=cor + uncor,
        hint=_AER_HINT if uncor else None,
    )


def check_aer(stories: Sequence[AerStory], devices: DeviceMap, cfg: HistoryConfig) -> list[Finding]:
    out: list[Finding] = []
    for s in stories:
        dev = devices.by_pci.get(s.device) or Device(s.device, "other", s.device)
        out += aer_window(s, dev, cfg)
        out += aer_total(s, dev)
    return out
