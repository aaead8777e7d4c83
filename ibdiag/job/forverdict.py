"""NCCL Inspector's measured bus bandwidth as ``ibdiag verdict``'s measured source (``verdict --inspector``).

``verdict`` sits below ``job`` in the layers: it takes the source as a function of the job's bucket size
and ranks (:data:`ibdiag.verdict.inputs.MeasuredSource`), which this module makes from Inspector's files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.errors import InputError
from ibdiag.job.config import JobConfig
from ibdiag.job.inspector import read_inspector
from ibdiag.job.timing import CommTiming, timings
from ibdiag.units import format_bytes
from ibdiag.verdict.inputs import Measured, MeasuredSource, closest_size

#: Inspector's name of the collective the verdict's arithmetic is about.
ALL_REDUCE = "AllReduce"


def inspector_source(
    paths: Sequence[Path], config: JobConfig, collective: CollectiveConfig
) -> MeasuredSource:
    """The busbw of the job's all-reduce as Inspector measured it in production: the communicator with
    the most ranks that ran AllReduce, at the message size closest to the bucket (log scale, as for
    ``--bench``), the median over its ranks and calls."""
    read = read_inspector(
        paths,
        max_file_bytes=config.inspector_max_file_bytes,
        max_records=config.inspector_max_records,
    )
    comms = timings(read.records, collective)
    names = ", ".join(str(p) for p in paths)

    def measured(bucket_bytes: int, ranks: int) -> Measured:
        comm = _largest_all_reduce(comms, names)
        rows = {r.bytes: r for r in comm.rows if r.coll == ALL_REDUCE and r.busbw_gbs is not None}
        size = closest_size(sorted(rows), bucket_bytes)
        busbw = rows[size].busbw_gbs
        assert busbw is not None  # rows keeps only measured ones
        notes: tuple[str, ...] = ()
        if comm.nranks != ranks:
            notes = (
                f"Inspector's communicator {comm.comm} has {comm.nranks} ranks, the job {ranks}",
            )
        return Measured(
            busbw,
            None,
            "inspector",
            path=names,
            size_bytes=size,
            how=f"NCCL Inspector: AllReduce of communicator {comm.comm} ({comm.nranks} ranks) at "
            f"{format_bytes(size)}, the median over {rows[size].ranks} ranks and {rows[size].calls} calls",
            notes=notes,
        )

    return measured


def _largest_all_reduce(comms: Sequence[CommTiming], names: str) -> CommTiming:
    ran = [
        c for c in comms if any(r.coll == ALL_REDUCE and r.busbw_gbs is not None for r in c.rows)
    ]
    if not ran:
        raise InputError(
            f"--inspector {names}: no AllReduce with a measured busbw in the Inspector records",
            hint="the verdict is about the gradients' all-reduce: give the logs of a job that ran one",
        )
    return max(ran, key=lambda c: (c.nranks, len(c.rows)))
