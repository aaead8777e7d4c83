"""``[job]`` settings: how long and how much of a RAS reply and Inspector files are read, and the bus
bandwidth a communicator is expected to reach. The straggler thresholds are ``[collective]``'s
(``straggler_share``, ``straggler_min_fraction``, ``straggler_min_time_us``): one method, one setting.

Example::

    [job]
    min_busbw_gbs = 170          # what `ibdiag verdict` says the fabric gives this job (8 x 400G)
    busbw_min_bytes = 67108864   # judge busbw only at messages of 64 MiB and more
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.config import bounded
from ibdiag.jsonread import MAX_DOCUMENT_BYTES


@dataclass(frozen=True)
class JobConfig:
    """``[job]`` settings."""

    ras_timeout_s: float = bounded(30.0, low=0, low_open=True, high=3600)
    """The whole exchange with a live RAS service, connect included (s). ``ncclras`` waits up to 1 s
    to connect and RAS up to 5 s per leg of its own collection plus 5 s more
    (``RAS_COLLECTIVE_LEG_TIMEOUT_SEC``, ``src/ras/ras_internal.h``); a job with dead processes takes
    longer, so 30 s leaves room for two such rounds."""
    max_ras_bytes: int = bounded(MAX_DOCUMENT_BYTES, low=1024, high=2**34)
    """Largest RAS reply or file read (bytes). The JSON status takes about 600 bytes per rank and
    communicator: 128 MiB holds 16384 ranks in 8 communicators each with room to spare."""
    inspector_max_file_bytes: int = bounded(4 * 2**30, low=1024, high=2**40)
    """Largest Inspector file read (bytes). Inspector's README estimates 200-500 bytes per operation:
    a process of 1M collectives over 4 communicators writes 200-500 MB."""
    inspector_max_records: int = bounded(2_000_000, low=1, high=100_000_000)
    """Collective records kept over all Inspector files (about 150 bytes of memory each); past it the
    rest is not read and the output says so."""
    min_busbw_gbs: float | None = bounded(None, low=0, low_open=True, high=1e6)
    """A communicator's busbw at its largest message size below this warns (GB/s). None: not judged.
    Give what ``ibdiag verdict`` says the fabric can give the job (its busbw ceiling)."""
    busbw_min_bytes: int = bounded(64 * 2**20, low=0, high=2**50)
    """Busbw is judged only at message sizes of at least this (bytes): below it a collective is bound
    by latency, not bandwidth. 64 MiB: nccl-tests' all_reduce busbw curves on 8-GPU InfiniBand nodes
    reach their plateau between 64 MiB and 1 GiB (NVIDIA's published DGX results)."""
