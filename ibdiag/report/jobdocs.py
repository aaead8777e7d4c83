"""``ibdiag job`` documents in the fleet view: each finding goes to the node it names.

A job document is written on one node but speaks of many: its findings' subjects start with the node
of the rank they are about (``gpu03:GPU4``), one of the nodes its ``ranks`` list names. Each is
filed under that node (a finding about the job as a whole stays with the node that wrote it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ibdiag.findings.model import Finding
from ibdiag.report.inputs import InputDoc


def per_node(docs: Iterable[InputDoc]) -> Sequence[InputDoc]:
    """Every job document split into one per node its findings name."""
    out: list[InputDoc] = []
    for d in docs:
        if d.kind != "job" or d.job is None:
            continue
        found: dict[str, list[Finding]] = {d.host: []}
        for f in d.findings:
            node = f.subject.split(":", 1)[0]
            found.setdefault(node if node in d.job.nodes else d.host, []).append(f)
        out += [replace(d, host=host, findings=tuple(fs)) for host, fs in found.items()]
    return out
