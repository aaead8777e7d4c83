"""Validation data: each op's semantics emulated on CPU tensors gives 0 wrong; corruption is counted.

No process group here: the collectives are computed with plain torch ops from every rank's input, so
the test checks the patterns and the expected values, not gloo (the real runs in
test_run.py do that).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

# after importorskip: these modules need torch
from ibdiag.bench.collective import validate  # noqa: E402
from ibdiag.bench.collective.plan import plan_size  # noqa: E402
from ibdiag.collectives import DTYPES, OPS  # noqa: E402


def _emulate(op: str, n: int, dtype: str, size: int, in_place: bool):
    """Every rank's (input, output) after the call, the call computed from all inputs."""
    spec, dt = OPS[op], DTYPES[dtype]
    plan = plan_size(spec, size, n, dt)
    tdt = getattr(torch, dtype)
    per = plan.count
    ranks = []
    for r in range(n):
        send_buf = torch.ones(plan.send_elems, dtype=tdt)
        recv_buf = (
            send_buf if spec.placements == (True,) else torch.ones(plan.recv_elems, dtype=tdt)
        )
        inp, out = validate.views(
            op, r, plan.send_elems, plan.recv_elems, per, in_place, send_buf, recv_buf
        )
        validate.prepare(op, r, n, inp, out, per)
        ranks.append((inp, out))
    inputs = [inp.clone() for inp, _ in ranks]
    if op in ("all_reduce", "reduce", "reduce_scatter"):
        total = torch.stack([x.double() for x in inputs]).sum(0).to(tdt)
    for r, (_, out) in enumerate(ranks):
        if op == "all_reduce" or (op == "reduce" and r == 0):
            out.copy_(total)
        elif op == "reduce_scatter":
            out.copy_(total[r * per : (r + 1) * per])
        elif op == "all_gather":
            out.copy_(torch.cat(inputs))
        elif op == "all_to_all":
            out.copy_(torch.cat([inputs[s][r * per : (r + 1) * per] for s in range(n)]))
        elif op == "broadcast":
            out.copy_(inputs[0])
        elif op == "sendrecv":
            out.copy_(inputs[(r - 1) % n])
    return ranks, per


CASES = [(op, in_place) for op, spec in OPS.items() for in_place in spec.placements]


@pytest.mark.parametrize(("op", "in_place"), CASES)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_correct_results_have_no_wrong_element(op, in_place, n, dtype):
    ranks, per = _emulate(op, n, dtype, 4096 * 3, in_place)
    for r, (_, out) in enumerate(ranks):
        assert validate.check(op, r, n, out, per) == 0


@pytest.mark.parametrize(("op", "in_place"), CASES)
def test_one_corrupted_element_is_counted(op, in_place):
    n = 3
    ranks, per = _emulate(op, n, "bfloat16", 3000, in_place)
    victim = 0 if op == "reduce" else 1  # reduce is only checked on its root
    out = ranks[victim][1]
    out[5] = out[5] + 1
    assert validate.check(op, victim, n, out, per) == 1


def test_sums_stay_exact_in_bfloat16_at_large_world_sizes():
    # one contributor per element: adding zeros is exact whatever the number of ranks
    ranks, per = _emulate("all_reduce", 300, "bfloat16", 2 * 600, True)
    assert all(
        validate.check("all_reduce", r, 300, out, per) == 0 for r, (_, out) in enumerate(ranks)
    )


def test_a_lost_contribution_is_wrong():
    n = 4
    ranks, per = _emulate("all_reduce", n, "float32", 4 * 64, True)
    out = ranks[2][1]
    out[1::4] = 0  # rank 1's contributions never arrived
    assert validate.check("all_reduce", 2, n, out, per) == 16


def test_swapped_chunks_are_wrong():
    n = 3
    ranks, per = _emulate("all_gather", n, "float32", 3 * 4 * 40, False)
    out = ranks[0][1]
    a, b = out[:per].clone(), out[per : 2 * per].clone()
    out[:per], out[per : 2 * per] = b, a
    assert validate.check("all_gather", 0, n, out, per) == 2 * per
    ranks, per = _emulate("all_to_all", n, "float16", 3 * 2 * 40, False)
    out = ranks[2][1]
    out[:per] = out[per : 2 * per].clone()
    assert validate.check("all_to_all", 2, n, out, per) == per


def test_large_buffers_are_checked_in_chunks(monkeypatch):
    monkeypatch.setattr(validate, "CHUNK", 7)
    ranks, per = _emulate("reduce_scatter", 3, "float32", 3 * 4 * 50, True)
    assert all(
        validate.check("reduce_scatter", r, 3, out, per) == 0 for r, (_, out) in enumerate(ranks)
    )
