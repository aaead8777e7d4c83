"""What ranks write in the store, read back checked: a rank's description, rank 0's fleet, and a
round's results as they travel from a rank to rank 0.

A rank reports the tests it measured as rows ``[rail, a, b, bw_gbs, lat_us, error, engine]``. Rank 0 reads
them as untrusted input (another process, or anyone who can reach the store, wrote them): a row that
is malformed or claims a test the rank did not measure is a :class:`~ibdiag.errors.InputError`, never
a result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeGuard

from ibdiag.errors import CannotRunError, InputError
from ibdiag.jsonread import JsonReader
from ibdiag.sweep.model import nodes_from_json
from ibdiag.sweep.nodes import FleetNode, Rail
from ibdiag.sweep.runner import PAIR_ENGINES, PairResult, unanswered
from ibdiag.sweep.schedule import MAX_NODES, PairTest, Phase
from ibdiag.text import safe_excerpt

__all__ = [
    "leave_out_silent",
    "node_doc_ok",
    "read_fleet_doc",
    "read_node_doc",
    "read_results",
    "refusal",
    "refused_error",
    "result_rows",
    "unanswered",
]

#: Most rows one rank reports per round (one per rail).
MAX_ROWS = 64


def printable(text: str | None, limit: int = 500) -> str | None:
    """An error message as one printable line of at most ``limit`` characters (what rank 0 accepts)."""
    if text is None:
        return None
    return "".join(c if c.isprintable() else " " for c in text)[:limit]


def result_rows(results: Iterable[PairResult]) -> list[list[Any]]:
    return [[p.rail, p.a, p.b, p.bw_gbs, p.lat_us, printable(p.error), p.engine] for p in results]


def read_results(
    value: Any, round_index: int, phase: Phase, reporter: int, n: int, *, source: str
) -> list[PairResult]:
    """Rows reported by rank ``reporter`` for round ``round_index``; every value checked."""
    r = JsonReader(source)
    out: list[PairResult] = []
    for i, row in enumerate(r.items(value, "rows", max_items=MAX_ROWS)):
        where = f"rows[{i}]"
        row = r.items(row, where, max_items=7)
        if len(row) != 7:
            raise r.error(where, "must be [rail, a, b, bw_gbs, lat_us, error, engine]")
        rail = r.integer(row[0], f"{where}[0]", lo=0, hi=MAX_ROWS - 1)
        a = r.integer(row[1], f"{where}[1]", lo=0, hi=n - 1)
        b = r.integer(row[2], f"{where}[2]", lo=reporter, hi=reporter)
        if a == b:
            raise r.error(where, "a node cannot be tested against itself")
        out.append(
            PairResult(
                round_index,
                phase,
                rail,
                a,
                b,
                r.opt_number(row[3], f"{where}[3]", lo=0, hi=1e5),
                lat_us=r.opt_number(row[4], f"{where}[4]", lo=0, hi=1e9),
                error=r.opt_text(row[5], f"{where}[5]", max_len=500),
                engine=None if row[6] is None else r.choice(row[6], f"{where}[6]", PAIR_ENGINES),
            )
        )
    return out


def read_node_doc(
    doc: Any, r: int, *, collective: bool, log: Callable[[str], None]
) -> tuple[FleetNode, list[int]] | None:
    """A rank's description (``node/<r>``), checked: a valid node of rank ``r`` and a port 1..65535 per
    rail (none for --test collective); None (and the reason logged) for anything else. One bad
    description makes that rank unreachable, not the sweep fail."""
    if not isinstance(doc, dict) or doc.get("rank") != r:
        return None
    probe = [
        {**{k: doc.get(k) for k in ("host", "address", "rails")}, "rank": 0},
        FleetNode(1, "probe", "probe", (Rail(0, None),)).to_json(),
    ]
    try:
        node = nodes_from_json(JsonReader(f"rank {r}'s description"), probe)[0]
    except InputError as e:
        log(f"refused: {e.message}")
        return None
    ports = doc.get("ports")
    want = 0 if collective else len(node.rails)
    if not (
        isinstance(ports, list)
        and len(ports) == want
        and all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 65535 for x in ports)
    ):
        return None
    return replace(node, rank=r), list(ports)


def node_doc_ok(
    doc: Any, r: int, *, collective: bool, log: Callable[[str], None]
) -> TypeGuard[dict[str, Any]]:
    """Whether :func:`read_node_doc` takes ``doc``."""
    return read_node_doc(doc, r, collective=collective, log=log) is not None


def read_fleet_doc(doc: Any) -> tuple[int, set[int]]:
    """Rank 0's ``fleet``: how many ranks the sweep has, and which never published (the others read a
    peer's own ``node/<r>`` when they first test against it, not every node: at 16384 ranks x 8 rails
    the whole fleet is 9 MiB, more than the store takes in one value, read by every rank)."""
    r = JsonReader("the sweep's fleet (store key fleet)")
    doc = r.obj(doc, "fleet")
    size = r.integer(doc.get("size"), "size", lo=2, hi=MAX_NODES)
    missing = {
        r.integer(x, "missing", lo=0, hi=size - 1)
        for x in r.items(doc.get("missing"), "missing", max_items=size)
    }
    return size, missing


def refusal(doc: Any) -> list[str] | None:
    """Why a node (``{"refused": why}``) or the fleet (``{"refused": [why, ...]}``) stopped the sweep
    before it began (``--transport rdma`` on a node without RDMA); None for any other document."""
    if not isinstance(doc, dict):
        return None
    why = doc.get("refused")
    if isinstance(why, str):
        return [safe_excerpt(why, 200)]
    if isinstance(why, list):
        return [safe_excerpt(str(w), 200) for w in why[:20]]
    return None


def refused_error(why: Sequence[str]) -> CannotRunError:
    more = f" (+{len(why) - 3} more nodes)" if len(why) > 3 else ""
    return CannotRunError(
        f"the sweep cannot run as asked: {'; '.join(why[:3])}{more}",
        hint="--transport auto measures over TCP where a node has no RDMA (and says so); "
        "or leave those nodes out of the job",
    )


def leave_out_silent(
    tests: Sequence[PairTest], dead: set[int], named: set[int]
) -> tuple[list[PairResult], list[PairTest]]:
    """The tests of a round with no node known silent, and a failed result naming each node that went
    silent, once (its first test after it went silent); its other tests are left out."""
    out: list[PairResult] = []
    live = []
    for t in tests:
        silent = tuple(r for r in (t.a.rank, t.b.rank) if r in dead)
        if silent:
            fresh = tuple(r for r in silent if r not in named)
            if fresh:
                named.update(fresh)
                out.append(
                    PairResult(
                        t.round,
                        t.phase,
                        t.rail,
                        t.a.rank,
                        t.b.rank,
                        None,
                        error="did not answer",
                        unreachable=fresh,
                    )
                )
            continue
        live.append(t)
    return out, live
