"""Result validation like nccl-tests' ``#wrong``: known inputs, known expected outputs, count mismatches.

Every value is a small integer (at most 251), so it is exact in float32, float16 and bfloat16 (8
significant bits: integers up to 256), and the sums are exact too: for the reductions exactly one rank
contributes a non-zero value to each element (``(i mod 13) + 1`` from rank ``i mod n``), so a lost,
doubled or misrouted contribution shows as a wrong element whatever the world size. Gathered and
exchanged data carries its source rank (``(rank mod 31) x 8 + (i mod 8)``), so a chunk put in the
wrong place is wrong too.

Buffers are filled and compared in chunks, so validating an 8 GiB buffer needs no 8 GiB reference.
torch is imported inside the functions (plain tensors only; torch.distributed stays in ``torchdist``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CHUNK = 1 << 24
"""Elements per fill/compare step (16 Mi: 128 MiB of int64 indices at most)."""


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


def contribution(idx: Any, rank: int, nranks: int) -> Any:
    """Reduction input: ``(i mod 13) + 1`` where ``i mod n == rank``, else 0 (``idx``: global element indices)."""
    import torch

    return torch.where(idx % nranks == rank, idx % 13 + 1, torch.zeros_like(idx))


def reduced(idx: Any) -> Any:
    """The sum every reduction must produce at global index ``idx``."""
    return idx % 13 + 1


def tagged(idx: Any, rank: int) -> Any:
    """Data that names its source rank: ``(rank mod 31) x 8 + (i mod 8)``."""
    return (rank % 31) * 8 + idx % 8


def broadcast_data(idx: Any) -> Any:
    return idx % 251 + 1


def fill(buf: Any, fn: Callable[[Any], Any], *, offset: int = 0) -> None:
    """``buf[i] = fn(offset + i)`` chunk by chunk."""
    import torch

    n = buf.numel()
    for a in _chunks(n):
        b = min(n, a + CHUNK)
        idx = torch.arange(offset + a, offset + b, device=buf.device, dtype=torch.int64)
        buf[a:b].copy_(fn(idx))


def count_wrong(buf: Any, fn: Callable[[Any], Any], *, offset: int = 0) -> int:
    """Elements of ``buf`` that differ from ``fn(offset + i)``."""
    import torch

    n = buf.numel()
    wrong = 0
    for a in _chunks(n):
        b = min(n, a + CHUNK)
        idx = torch.arange(offset + a, offset + b, device=buf.device, dtype=torch.int64)
        expected = fn(idx).to(buf.dtype)
        wrong += int((buf[a:b] != expected).sum().item())
    return wrong


def views(
    op: str,
    rank: int,
    send_elems: int,
    recv_elems: int,
    per: int,
    in_place: bool,
    send_buf: Any,
    recv_buf: Any,
) -> tuple[Any, Any]:
    """(input, output) views of the rank's buffers for one call, with nccl-tests' in-place offsets:
    all_gather's input is the rank's slice of the output, reduce_scatter's output the rank's slice of
    the input; the in-place-only ops (all_reduce, reduce, broadcast) use one buffer."""
    if op in ("all_reduce", "reduce", "broadcast"):
        buf = send_buf[:send_elems]
        return buf, buf
    if op == "all_gather":
        out = recv_buf[:recv_elems]
        return (out[rank * per : (rank + 1) * per] if in_place else send_buf[:send_elems]), out
    if op == "reduce_scatter":
        inp = send_buf[:send_elems]
        return inp, (inp[rank * per : (rank + 1) * per] if in_place else recv_buf[:recv_elems])
    return send_buf[:send_elems], recv_buf[:recv_elems]


def prepare(op: str, rank: int, nranks: int, send: Any, recv: Any, per: int) -> None:
    """Fill the buffers with the inputs of one validation call (``per``: per-rank chunk elements).

    ``send``/``recv`` are the views the call will use (for in-place calls they overlap as the call needs).
    """
    if op in ("all_reduce", "reduce"):
        fill(send, lambda i: contribution(i, rank, nranks))
    elif op == "reduce_scatter":
        fill(send, lambda i: contribution(i, rank, nranks))
    elif op == "all_gather":
        recv.fill_(-1)
        fill(send, lambda i: tagged(i, rank))
    elif op == "all_to_all":
        recv.fill_(-1)
        for k in range(nranks):
            # chunk k goes to rank k: value names the sender and the destination
            send[k * per : (k + 1) * per].fill_((rank % 31) * 8 + k % 8)
    elif op == "broadcast":
        if rank == 0:
            fill(send, broadcast_data)
        else:
            send.fill_(-1)
    elif op == "sendrecv":
        recv.fill_(-1)
        fill(send, lambda i: tagged(i, rank))
    else:
        raise ValueError(f"no validation for {op}")


def check(op: str, rank: int, nranks: int, recv: Any, per: int) -> int:
    """Wrong elements in this rank's output after the call (the root only, for reduce)."""
    if op == "all_reduce":
        return count_wrong(recv, reduced)
    if op == "reduce":
        return count_wrong(recv, reduced) if rank == 0 else 0
    if op == "reduce_scatter":
        return count_wrong(recv, reduced, offset=rank * per)
    if op == "all_gather":
        return sum(
            count_wrong(recv[s * per : (s + 1) * per], lambda i, s=s: tagged(i, s))  # type: ignore[misc]  # mypy#15459: no inference for a lambda with default args
            for s in range(nranks)
        )
    if op == "all_to_all":
        wrong = 0
        for s in range(nranks):
            value = (s % 31) * 8 + rank % 8
            wrong += int((recv[s * per : (s + 1) * per] != value).sum().item())
        return wrong
    if op == "broadcast":
        return count_wrong(recv, broadcast_data)
    if op == "sendrecv":
        return count_wrong(recv, lambda i: tagged(i, (rank - 1) % nranks))
    raise ValueError(f"no validation for {op}")
