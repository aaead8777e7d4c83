"""Ports -> findings, the same for ``ibdiag topo``, ``ibdiag counters`` and ``ibdiag verdict --root``.

Check ids (stable; subject ``mlx5_0:1``):

* ``port.state``  RDMA port not ACTIVE/LinkUp: fail (the hint says which: no cable, disabled, no SM);
                  state unreadable: warn
* ``port.rate``   active port slower than expected (:mod:`ibdiag.ports.rates`): fail; unreadable: warn

They were ``topo.port_state``/``topo.port_rate`` and ``counters.port_state``/``counters.port_rate``,
two judgements with two configs that could disagree on the same port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.node.model import Port
from ibdiag.ports.config import PortsConfig
from ibdiag.ports.rates import ExpectedRate, ExpectedRates

CHECKS = CheckRegistry("port")


def _why_not_active(port: Port) -> str:
    if port.phys_state in ("Polling", "Sleep"):
        return "no link partner: check the cable/transceiver and the switch port"
    if port.phys_state == "Disabled":
        return "the port is administratively disabled (ibportstate / mlxlink)"
    if port.phys_state == "LinkUp" and port.state == "INIT":
        return "link is up but the subnet manager has not configured it: check that an SM (opensm/UFM) runs and sees this port"
    if port.phys_state == "LinkUp":
        return "link is up but the logical state is not ACTIVE: check the subnet manager"
    return "check cabling, the switch port and `ibstat`/`mlxlink` for this port"


@CHECKS.check("port.state", "RDMA port not ACTIVE/LinkUp: fail; state unreadable: warn")
def port_state(port: Port) -> Finding:
    """``ibstat``'s State and Physical state."""
    subject = f"{port.adapter}:{port.port}"
    if port.state is None or port.phys_state is None:
        return Finding(
            "port.state",
            Severity.WARN,
            subject,
            "port state could not be read",
            hint=f"check /sys/class/infiniband/{port.adapter}/ports/{port.port}/state and phys_state",
        )
    if not port.active or not port.link_up:
        return Finding(
            "port.state",
            Severity.FAIL,
            subject,
            f"port is {port.state}/{port.phys_state}, not ACTIVE/LinkUp",
            value=f"{port.state}/{port.phys_state}",
            limit="ACTIVE/LinkUp",
            hint=_why_not_active(port),
        )
    return Finding(
        "port.state", Severity.OK, subject, "port is ACTIVE/LinkUp", value="ACTIVE/LinkUp"
    )


@CHECKS.check(
    "port.rate",
    "active port slower than expected ([ports], default: the fastest active port of its link layer): fail; unreadable: warn",
)
def port_rate(port: Port, expected: ExpectedRate) -> Finding:
    """``ibstat``'s Rate against what the port must reach."""
    subject = f"{port.adapter}:{port.port}"
    want = expected.rate_gbps
    if port.rate_gbps is None and port.software:
        return Finding(
            "port.rate",
            Severity.OK,
            subject,
            f"rate unknown: {port.rate_source}",
            hint="a software device (rxe, siw) runs at its netdev's speed; `ethtool <netdev>` shows it",
        )
    if port.rate_gbps is None:
        return Finding(
            "port.rate",
            Severity.WARN,
            subject,
            "port rate could not be read",
            hint=f"check /sys/class/infiniband/{port.adapter}/ports/{port.port}/rate",
        )
    if want is not None and port.rate_gbps < want:
        return Finding(
            "port.rate",
            Severity.FAIL,
            subject,
            f"port runs at {port.rate_gbps:g} Gb/s ({port.lanes or '?'}X {port.lane_speed or '?'}), expected {want:g} Gb/s ({expected.source})",
            value=port.rate_gbps,
            limit=want,
            unit="Gb/s",
            hint="a port that trained slow or narrow: reseat or replace the cable/transceiver, check the switch port (mlxlink -d <dev> shows lanes and FEC)",
        )
    source = f" ({port.rate_source})" if port.rate_source else ""
    return Finding(
        "port.rate",
        Severity.OK,
        subject,
        f"port runs at {port.rate_gbps:g} Gb/s{source}",
        value=port.rate_gbps,
        limit=want,
        unit="Gb/s",
    )


@CHECKS.check(
    "port.expect_on",
    "an expected rate whose adapter set ([ports] expect_on, --expect-on) holds no port of this node: warn",
)
def expect_on_empty(config: PortsConfig, expected: ExpectedRates) -> Finding | None:
    """``--expect-on mlx9_*`` (a typo) or ``ethernet`` on an InfiniBand-only node: the expected rate
    would judge nothing, silently. Said, so that a health check does not pass for the wrong reason."""
    if config.expected_rate_gbps is None or expected.scope is None or expected.scope:
        return None
    return Finding(
        "port.expect_on",
        Severity.WARN,
        "node",
        f"the expected rate {config.expected_rate_gbps:g} Gb/s is for [ports] expect_on = "
        f"{config.expect_on!r}, which holds no port of this node: no port was judged against it",
        hint="check the adapter names (ibv_devices) or the set: all, gpu, infiniband, ethernet, mlx5_0,...",
    )


def check_ports(
    ports: Sequence[Port],
    config: PortsConfig,
    *,
    peers: Iterable[Port] | None = None,
    gpu_names: Iterable[str] = (),
) -> list[Finding]:
    """``port.state`` for every judged port, and ``port.rate`` for those that are up.

    ``peers``: the node's ports the default expected rate comes from (default ``ports``; give all of
    them when ``ports`` is a selection, so that a slow port is still judged against the node).
    ``gpu_names``: the GPU-facing adapters (:func:`ibdiag.ports.selection.gpu_facing`), which
    ``[ports] expect_on = "gpu"`` means; without them that expectation applies to no port.
    """
    expected = ExpectedRates.of(ports if peers is None else peers, config, gpu_names)
    out: list[Finding] = expect_on_empty(config, expected)
    for port in ports:
        if config.ignored(port.adapter, port.port):
            continue
        state = port_state(port)
        out.extend(state)
        if state[0].severity is Severity.OK:
            out.extend(port_rate(port, expected.for_port(port)))
    return out
