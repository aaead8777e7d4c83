"""Every switch port's data and packet counters, from ``ibqueryerrors --counters --switch``. Pure.

``ibqueryerrors --data`` prints the data counters of a port only beside an error counter above its
threshold: a healthy port's bandwidth never shows. ``--counters`` prints, for every port of every
node it is given (``--switch``: every switch), the PortCountersExtended data and packet counters
where the switch has them (else PortCounters' 32-bit ones)::

    Data Counters for 0xb8cef60300000003 "leaf-r2-1"
       GUID 0xb8cef60300000003 port 3: [PortXmitData == 1152 (4.500KB)] [PortRcvData == 1152 (4.500KB)] [PortXmitPkts == 16 (16.000)] ...

one PMA query per port in one process, from the discovery's cache (infiniband-diags'
``ibqueryerrors.c``, ``print_data_cnts``). treydock/infiniband_exporter's switch collector reads the
same counters with one ``perfquery -l -x -G <guid> <ports>`` per switch (``collectors/switch.go``).

The values join the error counters' read of the same port (:class:`ibdiag.counters.model.PortCounters`,
keyed ``(node GUID, port)``): 4-octet words in ``port_xmit_data``/``port_rcv_data`` (``xmit_bytes``
and ``rcv_bytes`` x 4), packets in the others; the width of the data and packet counters is
``counters``' own rule (64 bits where the extended-only unicast/multicast counters are listed or a
value passes 2^32 - 1, else 32), and a value at its width's maximum is saturated, a lower bound.
"""

from __future__ import annotations

from dataclasses import replace

from ibdiag.counters.model import PortCounters, Sample
from ibdiag.counters.spec import (
    BYTES_PER_DATA_WORD,
    DATA_BYTES,
    IB_COUNTERS,
    Kind,
    data_counter_bits,
    max_value,
)
from ibdiag.fabric.queryerrors import parse_queryerrors

#: IBA name -> counters' key, for the data and packet counters.
DATA_BY_IBA = {
    spec.iba: name for name, spec in IB_COUNTERS.items() if spec.kind in (Kind.DATA, Kind.PACKETS)
}


def run_name(counters_run: str) -> str:
    """The data counters' run beside an error counters' run: ``ibqueryerrors-data`` beside
    ``ibqueryerrors``, ``ibqueryerrors-data-1`` beside ``--interval``'s ``ibqueryerrors-1``."""
    return counters_run.replace("ibqueryerrors", "ibqueryerrors-data", 1)


def with_data(sample: Sample, text: str) -> Sample:
    """``sample`` with the data and packet counters ``text`` (``ibqueryerrors --counters`` output)
    lists for its ports; a port it does not list keeps what it had."""
    listed = parse_queryerrors(text)
    if not listed:
        return sample
    ports = []
    for pc in sample.ports:
        found = listed.get((pc.adapter, pc.port)) if pc.port is not None else None
        ports.append(pc if not found else _joined(pc, found))
    return replace(sample, ports=tuple(ports))


def _joined(pc: PortCounters, by_iba: dict[str, int]) -> PortCounters:
    data = {DATA_BY_IBA[k]: v for k, v in by_iba.items() if k in DATA_BY_IBA}
    if not data:
        return pc
    values: dict[str, int | None] = {**(pc.counters or {}), **data}
    bits = data_counter_bits(values)
    saturated = set(pc.saturated)
    for k, v in data.items():
        if v >= max_value(IB_COUNTERS[k].bits or bits):
            saturated.add(k)
    words = {DATA_BYTES[k]: v for k, v in data.items() if k in DATA_BYTES}
    return replace(
        pc,
        counters=values,
        saturated=frozenset(saturated),
        data_bits=bits,
        xmit_bytes=None if "xmit_bytes" not in words else words["xmit_bytes"] * BYTES_PER_DATA_WORD,
        rcv_bytes=None if "rcv_bytes" not in words else words["rcv_bytes"] * BYTES_PER_DATA_WORD,
    )
