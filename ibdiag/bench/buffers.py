"""The one place benchmark buffers are allocated.

Today: page-aligned host memory from an anonymous ``mmap`` (pre-faulted with ``MAP_POPULATE`` so
the first measured message does not pay for page faults, as perftest touches its buffers before
timing). The same object carries the address an RDMA memory region registers. GPU memory (a
DMA-BUF exported by the GPU driver, registered with ``ibv_reg_dmabuf_mr``) will plug in here as
another ``kind`` so that no data path has to change.
"""

from __future__ import annotations

import ctypes
import mmap

from ibdiag.errors import CannotRunError, NotSupportedError
from ibdiag.units import format_bytes

KINDS = ("host",)


class Buffer:
    """A contiguous, page-aligned buffer of ``size`` bytes.

    ``view`` is a writable memoryview for sockets (``sendall``/``recv_into``); ``address`` is its
    virtual address for RDMA registration. Use as a context manager or call :meth:`close`.
    """

    kind = "host"

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"buffer size must be positive, not {size}")
        self.size = size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        try:
            self._map: mmap.mmap | None = mmap.mmap(-1, size, flags=flags)
        except (OSError, OverflowError, MemoryError) as e:
            raise CannotRunError(
                f"cannot allocate a {format_bytes(size)} buffer: {e}",
                hint="use smaller --sizes or fewer --streams, or free memory on this host",
            ) from None
        self.view = memoryview(self._map)
        self._anchor: ctypes.c_char | None = None

    @property
    def address(self) -> int:
        """Virtual address of the first byte (for ``ibv_reg_mr``)."""
        if self._map is None:
            raise ValueError("buffer is closed")
        if self._anchor is None:
            # from_buffer keeps an export on the mmap; it is dropped in close() before unmapping.
            self._anchor = ctypes.c_char.from_buffer(self._map)
        return ctypes.addressof(self._anchor)

    def close(self) -> None:
        if self._map is None:
            return
        self._anchor = None
        try:
            self.view.release()
            self._map.close()
        except BufferError:  # an RDMA registration or a slice still exports it: let GC unmap it
            pass
        self._map = None

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.size


def allocate(size: int, kind: str = "host") -> Buffer:
    """A benchmark buffer of ``size`` bytes in memory of ``kind`` (only ``host`` today)."""
    if kind != "host":
        raise NotSupportedError(
            f"{kind} buffers are not supported yet", hint="benchmarks use host memory today"
        )
    return Buffer(size)
