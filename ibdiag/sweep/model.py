"""The sweep's result: settings, nodes, every pair test, and the analysis — JSON ``ibdiag.sweep/1``.

The document is the common envelope plus::

    {"sweep":  {pattern, random_rounds, seed, test, transport, bytes, mode, duration_s, timeout_s,
                engine, engine_requested, second_pass, first_pass_rounds, second_pass_rounds, tests,
                thresholds: {...}},
     "nodes":  [{rank, host, address, rails: [{rail, adapter, port, rate_gbps}],
                 status, whole_node, bad_rails, suspect_rails, ends: [{rail, partners, ...}]}],
     "rails":  [{rail, links, median_bw_gbs, mad_bw_gbs, scale_bw_gbs, limit_bw_gbs, ...}],
     "links":  [slow links only: {rail, a, b, tests, failed, bw_gbs, line_rate_share, z, verdict, ...}],
     "pairs":  {"columns": [round, phase, rail, a, a_adapter, b, b_adapter, bw_gbs, lat_us, error, unreachable, engine, shared],
                "rows": [[0, "first", 0, 0, "mlx5_0", 1, "mlx5_0", 48.2, null, null, [], "ibdiag", false], ...]}}

``pairs`` is columnar (``pandas.DataFrame(rows, columns=columns)``) because it is the bulk of the file.
Each pair's ``engine`` is who measured it on its measuring node (``--engine auto`` decides per node);
``sweep.engine`` sums them up — ``ibdiag``, ``perftest``, ``ibdiag+perftest`` when nodes chose
differently, null when no p2p test ran — and ``sweep.engine_requested`` is the ``--engine`` given.
Older files (no ``engine`` column; ``sweep.engine`` was the option, absent before ``--engine``:
ibdiag) read with each pair's engine from that option where it names one (TCP pairs: ibdiag), else
unknown (null). ``shared`` (a test that ran beside others that may have crossed its links: a slow
result of it proves nothing, :mod:`~ibdiag.sweep.linkstats`) is false in files written before it, as
they were judged then. ``sweep.phase`` of a pair is ``first``, ``second`` or ``confirm`` (re-tested
alone); ``sweep.fabric`` says what the rounds knew of the fabric (null: nothing).
Reading a document back (:meth:`SweepResult.from_json`) checks the settings, nodes and pairs and
recomputes ``nodes``' verdicts, ``rails`` and ``links`` from the pairs: they are derived, so a file
cannot claim a verdict its measurements do not support.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import UsageError
from ibdiag.jsonread import JsonReader
from ibdiag.sweep.analysis import Analysis, LinkVerdict, NodeStatus, SweepConfig
from ibdiag.sweep.attribution import analyse
from ibdiag.sweep.layout import HASHED, ROUTES, ROUTINGS, FabricLayout
from ibdiag.sweep.nodes import ADAPTER_RE, HOST_RE, FleetNode, Rail, check_fleet
from ibdiag.sweep.runner import PAIR_ENGINES, PairResult, PairSpec
from ibdiag.sweep.schedule import MAX_NODES, MAX_RANDOM_ROUNDS, Pattern, Phase

SCHEMA = "ibdiag.sweep/1"
PAIR_COLUMNS = (
    "round",
    "phase",
    "rail",
    "a",
    "a_adapter",
    "b",
    "b_adapter",
    "bw_gbs",
    "lat_us",
    "error",
    "unreachable",
    "engine",
    "shared",
)
#: The columns of files written before each pair said whether its round was shared.
PAIR_COLUMNS_WITHOUT_SHARED = PAIR_COLUMNS[:12]
#: The columns of files written before each pair recorded its engine.
PAIR_COLUMNS_WITHOUT_ENGINE = PAIR_COLUMNS[:11]
#: ``sweep.engine``: the engines the pairs used, joined with ``+`` (null: none recorded).
USED_ENGINES = ("ibdiag", "perftest", "ibdiag+perftest")
#: Most pair tests a document may hold (16384 nodes x 8 rails x 64 rounds; a larger file is refused).
MAX_PAIRS = 16384 * 8 * 64
#: Most rails per node (DGX-class nodes have 8; 64 leaves room and bounds the input).
MAX_RAILS = 64


@dataclass(frozen=True)
class FabricUse:
    """What the sweep's rounds knew of the fabric (``--fabric``)."""

    source: str
    routing: str
    """``routes``, ``destination`` or ``hashed`` (:mod:`~ibdiag.sweep.layout`)."""
    two_tier: bool
    unplaced: tuple[int, ...]
    """Ranks with a rail the description does not have: their tests are not kept apart."""
    max_load: int | None
    """The most tests on one link (or one leaf's uplinks one way) in any round, as the description
    sees it: 1 when no round shared a link."""

    @property
    def proven(self) -> bool:
        """The packed rounds are proven free of shared links (exact routes, or a two-tier tree and
        one test per leaf and direction), for the nodes placed."""
        return self.routing == ROUTES or (self.routing == HASHED and self.two_tier)

    @classmethod
    def of(cls, layout: FabricLayout | None, max_load: int | None) -> FabricUse | None:
        if layout is None:
            return None
        d = layout.description
        return cls(d.source, d.routing, d.two_tier, layout.unplaced, max_load)

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "routing": self.routing,
            "two_tier": self.two_tier,
            "proven": self.proven,
            "unplaced": list(self.unplaced),
            "max_link_load": self.max_load,
        }


@dataclass(frozen=True)
class SweepSettings:
    pattern: Pattern
    random_rounds: int | None
    """Rounds of ``--pattern random``; None for the patterns that fix their rounds."""
    seed: int
    spec: PairSpec
    second_pass: bool
    first_pass_rounds: int
    """Rounds the first pass ran (the pattern's, packed apart on the fabric: :attr:`pattern_rounds` or more)."""
    second_pass_rounds: int
    confirm_rounds: int = 0
    """Rounds of the confirmation pass (slow results of shared rounds re-tested alone)."""
    pattern_rounds: int | None = None
    """The pattern's own rounds (None: as many as the first pass ran)."""
    fabric: FabricUse | None = None


@dataclass(frozen=True)
class SweepResult:
    settings: SweepSettings
    nodes: tuple[FleetNode, ...]
    pairs: tuple[PairResult, ...]
    analysis: Analysis

    @property
    def rails(self) -> int:
        """Most rails any node has."""
        return max(len(n.rails) for n in self.nodes)

    @property
    def engine(self) -> str | None:
        """Who measured the pair tests: ``ibdiag``, ``perftest``, ``ibdiag+perftest`` (each measuring node
        chose for itself: ``--engine auto``), None when no pair says (no p2p test ran, older files)."""
        used = {p.engine for p in self.pairs}
        names = [e for e in PAIR_ENGINES if e in used]
        return "+".join(names) if names else None

    @property
    def tcp_fallback(self) -> tuple[int, ...]:
        """Ranks measured over TCP because ``--transport auto`` found no usable RDMA on them."""
        spec = self.settings.spec
        if spec.test != "p2p" or spec.transport_requested != "auto":
            return ()
        return tuple(
            n.rank
            for n, v in zip(self.nodes, self.analysis.nodes, strict=False)
            if v.status is not NodeStatus.UNREACHABLE and all(r.adapter is None for r in n.rails)
        )

    def confirmation(self) -> dict[str, int]:
        """What the collisions cost and what the re-tests alone found: tests that ran beside others
        that may have crossed their links (``shared_tests``), tests re-run alone or proven apart
        (``retests``), links and nodes slow beside other tests and fine alone (``links_cleared``,
        ``nodes_cleared``), links still slow only beside others (``links_confounded``)."""
        a = self.analysis
        return {
            "shared_tests": sum(1 for p in self.pairs if p.shared),
            "retests": sum(1 for p in self.pairs if p.phase is Phase.CONFIRM),
            "links_cleared": len(a.cleared_links),
            "nodes_cleared": len(a.cleared_nodes),
            "links_confounded": len(a.links_with(LinkVerdict.CONFOUNDED)),
        }

    def adapter(self, rank: int, rail: int) -> str | None:
        r = self.nodes[rank].rail(rail)
        return None if r is None else r.adapter

    def to_json(self) -> dict[str, Any]:
        s, cfg = self.settings, self.analysis.config
        sweep = {
            "pattern": s.pattern.value,
            "random_rounds": s.random_rounds,
            "seed": s.seed,
            **s.spec.to_json(),
            "engine": self.engine,
            "engine_requested": s.spec.engine,
            "second_pass": s.second_pass,
            "first_pass_rounds": s.first_pass_rounds,
            "second_pass_rounds": s.second_pass_rounds,
            "confirm_rounds": s.confirm_rounds,
            "pattern_rounds": s.pattern_rounds
            if s.pattern_rounds is not None
            else s.first_pass_rounds,
            "fabric": None if s.fabric is None else s.fabric.to_json(),
            "confirmation": self.confirmation(),
            "tests": len(self.pairs),
            "thresholds": {
                "z_limit": cfg.z_limit,
                "floor_share": cfg.floor_share,
                "ratio_limit": cfg.ratio_limit,
                "z_min_links": cfg.z_min_links,
                "confirm_partners": cfg.confirm_partners,
                "second_pass_partners": cfg.second_pass_partners,
                "min_bw_share": cfg.min_bw_share,
                "confirm_max_rounds": cfg.confirm_max_rounds,
            },
        }
        nodes = []
        for node, verdict in zip(self.nodes, self.analysis.nodes, strict=False):
            doc = node.to_json()
            doc.update(
                {
                    "status": verdict.status.value,
                    "whole_node": verdict.whole_node,
                    "bad_rails": list(verdict.bad_rails),
                    "suspect_rails": list(verdict.suspect_rails),
                    "ends": [e.to_json() for e in verdict.ends],
                }
            )
            nodes.append(doc)
        rows = [
            [
                p.round,
                p.phase.value,
                p.rail,
                p.a,
                self.adapter(p.a, p.rail),
                p.b,
                self.adapter(p.b, p.rail),
                p.bw_gbs,
                p.lat_us,
                p.error,
                list(p.unreachable),
                p.engine,
                p.shared,
            ]
            for p in self.pairs
        ]
        return {
            "sweep": sweep,
            "nodes": nodes,
            "rails": [r.to_json() for r in self.analysis.rails],
            "links": [
                link.to_json() for link in self.analysis.links if link.verdict is not LinkVerdict.OK
            ],
            "pairs": {"columns": list(PAIR_COLUMNS), "rows": rows},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], source: str = "sweep") -> SweepResult:
        """Check an ``ibdiag.sweep/1`` document (already past the envelope check) and rebuild the result.

        Raises :class:`~ibdiag.errors.InputError` naming the first bad value.
        """
        r = JsonReader(source)
        top = "sweep"  # paths in error messages: sweep.pattern, sweep.thresholds.z_limit ...
        sw = r.obj(doc.get(top), top)
        config = _thresholds_from_json(r, r.obj(sw.get("thresholds"), f"{top}.thresholds"))
        spec = PairSpec(
            test=r.choice(sw.get("test"), f"{top}.test", ("p2p", "collective")),
            transport=(
                transport := r.choice(sw.get("transport"), f"{top}.transport", ("rdma", "tcp"))
            ),
            transport_requested=_requested_transport(r, sw, top, transport),
            bytes=r.integer(sw.get("bytes"), f"{top}.bytes", lo=1, hi=2**34),
            mode=r.choice(sw.get("mode"), f"{top}.mode", ("bw", "lat", "both")),
            duration_s=r.number(sw.get("duration_s"), f"{top}.duration_s", lo=1e-6, hi=3600),
            timeout_s=r.number(sw.get("timeout_s"), f"{top}.timeout_s", lo=1e-6, hi=3600),
            engine=_requested_engine(r, sw, top),
        )
        pattern = Pattern(r.choice(sw.get("pattern"), f"{top}.pattern", [p.value for p in Pattern]))
        settings = SweepSettings(
            pattern=pattern,
            random_rounds=r.opt_integer(
                sw.get("random_rounds"), f"{top}.random_rounds", lo=1, hi=MAX_RANDOM_ROUNDS
            ),
            seed=r.integer(sw.get("seed"), f"{top}.seed", lo=-(2**63), hi=2**63),
            spec=spec,
            second_pass=r.flag(sw.get("second_pass"), f"{top}.second_pass"),
            first_pass_rounds=r.integer(
                sw.get("first_pass_rounds"), f"{top}.first_pass_rounds", lo=0, hi=MAX_NODES
            ),
            second_pass_rounds=r.integer(
                sw.get("second_pass_rounds"), f"{top}.second_pass_rounds", lo=0, hi=MAX_NODES
            ),
            # absent from sweeps saved before the confirmation pass and --fabric
            confirm_rounds=r.integer(
                sw.get("confirm_rounds", 0), f"{top}.confirm_rounds", lo=0, hi=MAX_NODES
            ),
            pattern_rounds=r.opt_integer(
                sw.get("pattern_rounds"), f"{top}.pattern_rounds", lo=0, hi=MAX_NODES
            ),
            fabric=_fabric_from_json(r, sw.get("fabric"), f"{top}.fabric"),
        )
        fleet = nodes_from_json(r, doc.get("nodes"))
        pairs = _pairs_from_json(r, doc.get("pairs"), fleet, spec)
        return cls(settings, fleet, pairs, analyse(fleet, pairs, config))


def _thresholds_from_json(r: JsonReader, th: Mapping[str, Any]) -> SweepConfig:
    """``sweep.thresholds``, checked; a threshold absent from a file saved before it existed: its default."""
    top = "sweep"
    return SweepConfig(
        z_limit=r.number(th.get("z_limit"), f"{top}.thresholds.z_limit", lo=0.5, hi=1000),
        floor_share=r.number(th.get("floor_share"), f"{top}.thresholds.floor_share", lo=0, hi=1),
        # absent from sweeps saved before they existed: the defaults
        ratio_limit=r.number(
            th.get("ratio_limit", SweepConfig.ratio_limit),
            f"{top}.thresholds.ratio_limit",
            lo=0,
            hi=0.95,
        ),
        z_min_links=r.integer(
            th.get("z_min_links", SweepConfig.z_min_links),
            f"{top}.thresholds.z_min_links",
            lo=1,
            hi=100000,
        ),
        confirm_partners=r.integer(
            th.get("confirm_partners"), f"{top}.thresholds.confirm_partners", lo=1, hi=1000
        ),
        second_pass_partners=r.integer(
            th.get("second_pass_partners"),
            f"{top}.thresholds.second_pass_partners",
            lo=0,
            hi=1000,
        ),
        min_bw_share=r.number(th.get("min_bw_share"), f"{top}.thresholds.min_bw_share", lo=0, hi=1),
        confirm_max_rounds=r.integer(
            th.get("confirm_max_rounds", SweepConfig.confirm_max_rounds),
            f"{top}.thresholds.confirm_max_rounds",
            lo=0,
            hi=100000,
        ),
    )


def nodes_from_json(r: JsonReader, value: Any, where: str = "nodes") -> tuple[FleetNode, ...]:
    """The ``nodes`` list of a sweep document (or of the sweep's ``fleet`` store key), checked."""
    nodes = []
    for i, nd in enumerate(r.items(value, where, max_items=MAX_NODES)):
        at = f"{where}[{i}]"
        nd = r.obj(nd, at)
        rails = []
        for j, rd in enumerate(r.items(nd.get("rails"), f"{at}.rails", max_items=MAX_RAILS)):
            rw = f"{at}.rails[{j}]"
            rd = r.obj(rd, rw)
            rails.append(
                Rail(
                    index=r.integer(rd.get("rail"), f"{rw}.rail", lo=j, hi=j),
                    adapter=r.opt_text(
                        rd.get("adapter"), f"{rw}.adapter", max_len=64, pattern=ADAPTER_RE
                    ),
                    port=r.opt_integer(rd.get("port"), f"{rw}.port", lo=0, hi=255),
                    rate_gbps=r.opt_number(rd.get("rate_gbps"), f"{rw}.rate_gbps", lo=0, hi=1e5),
                )
            )
        nodes.append(
            FleetNode(
                rank=r.integer(nd.get("rank"), f"{at}.rank", lo=i, hi=i),
                host=r.text(nd.get("host"), f"{at}.host", max_len=253, pattern=HOST_RE),
                address=r.text(nd.get("address"), f"{at}.address", max_len=253, pattern=HOST_RE),
                rails=tuple(rails),
            )
        )
    try:
        return check_fleet(nodes)
    except UsageError as e:  # the node checks' complaint is, here, bad input
        raise r.error(where, e.message) from None


def _fabric_from_json(r: JsonReader, value: Any, where: str) -> FabricUse | None:
    if value is None:
        return None
    f = r.obj(value, where)
    return FabricUse(
        source=r.text(f.get("source"), f"{where}.source", max_len=500),
        routing=r.choice(f.get("routing"), f"{where}.routing", ROUTINGS),
        two_tier=r.flag(f.get("two_tier"), f"{where}.two_tier"),
        unplaced=tuple(
            r.integer(x, f"{where}.unplaced[{i}]", lo=0, hi=MAX_NODES)
            for i, x in enumerate(
                r.items(f.get("unplaced"), f"{where}.unplaced", max_items=MAX_NODES)
            )
        ),
        max_load=r.opt_integer(
            f.get("max_link_load"), f"{where}.max_link_load", lo=0, hi=MAX_NODES
        ),
    )


def _requested_transport(r: JsonReader, sw: Mapping[str, Any], top: str, ran: str) -> str | None:
    """``--transport`` as given, where it differs from what ran (absent in older files: what ran)."""
    given = r.choice(
        sw.get("transport_requested", ran), f"{top}.transport_requested", ("rdma", "tcp", "auto")
    )
    return None if given == ran else given


def _requested_engine(r: JsonReader, sw: Mapping[str, Any], top: str) -> str:
    """``--engine`` as given: ``engine_requested``; in older files ``engine`` was that (absent before
    ``--engine``: ibdiag's). ``engine`` in a newer file is derived from the pairs, checked only for its form."""
    requested = ("auto", "ibdiag", "perftest")
    if "engine_requested" not in sw:
        return r.choice(sw.get("engine", "ibdiag"), f"{top}.engine", requested)
    if sw.get("engine") is not None:
        r.choice(sw.get("engine"), f"{top}.engine", USED_ENGINES)
    return r.choice(sw.get("engine_requested"), f"{top}.engine_requested", requested)


def _older_pair_engine(
    spec: PairSpec, a_adapter: Any, b_adapter: Any, unreachable: tuple[int, ...]
) -> str | None:
    """A pair's engine in a file without the column: ibdiag's over TCP, else ``--engine`` where it named one."""
    if spec.test != "p2p" or unreachable:
        return None
    if a_adapter is None or b_adapter is None or spec.transport == "tcp":
        return "ibdiag"
    return spec.engine if spec.engine in PAIR_ENGINES else None


def _pairs_from_json(
    r: JsonReader, value: Any, nodes: tuple[FleetNode, ...], spec: PairSpec
) -> tuple[PairResult, ...]:
    table = r.obj(value, "pairs")
    columns = tuple(r.items(table.get("columns"), "pairs.columns", max_items=len(PAIR_COLUMNS)))
    if columns not in (PAIR_COLUMNS, PAIR_COLUMNS_WITHOUT_SHARED, PAIR_COLUMNS_WITHOUT_ENGINE):
        raise r.error("pairs.columns", f"must be {list(PAIR_COLUMNS)}")
    width = len(columns)
    n = len(nodes)
    phases = {p.value: p for p in Phase}
    out: list[PairResult] = []
    for i, row in enumerate(r.items(table.get("rows"), "pairs.rows", max_items=MAX_PAIRS)):
        where = f"pairs.rows[{i}]"
        if not isinstance(row, list) or len(row) != width:
            raise r.error(where, f"must be a list of {width} values")
        rnd, phase, rail, a, a_adapter, b, b_adapter, bw, lat, err, silent = row[:11]
        a = r.integer(a, f"{where}[3]", lo=0, hi=n - 1)
        b = r.integer(b, f"{where}[5]", lo=0, hi=n - 1)
        rail = r.integer(rail, f"{where}[2]", lo=0, hi=MAX_RAILS - 1)
        if a == b:
            raise r.error(where, "a node cannot be tested against itself")
        for end, adapter, col in ((a, a_adapter, 4), (b, b_adapter, 6)):
            have = nodes[end].rail(rail)
            if have is None or have.adapter != adapter:
                raise r.error(
                    f"{where}[{col}]", f"rank {end} has no rail {rail} with adapter {adapter!r}"
                )
        unreachable = tuple(
            r.integer(x, f"{where}[10][{k}]", lo=0, hi=n - 1)
            for k, x in enumerate(r.items(silent, f"{where}[10]", max_items=2))
        )
        if width >= len(PAIR_COLUMNS_WITHOUT_SHARED):
            engine = None if row[11] is None else r.choice(row[11], f"{where}[11]", PAIR_ENGINES)
        else:
            engine = _older_pair_engine(spec, a_adapter, b_adapter, unreachable)
        out.append(
            PairResult(
                round=r.integer(rnd, f"{where}[0]", lo=0, hi=MAX_NODES * 2),
                phase=phases[r.choice(phase, f"{where}[1]", tuple(phases))],
                rail=rail,
                a=a,
                b=b,
                bw_gbs=r.opt_number(bw, f"{where}[7]", lo=0, hi=1e5),
                lat_us=r.opt_number(lat, f"{where}[8]", lo=0, hi=1e9),
                error=r.opt_text(err, f"{where}[9]", max_len=500),
                unreachable=unreachable,
                engine=engine,
                shared=r.flag(row[12], f"{where}[12]") if width == len(PAIR_COLUMNS) else False,
            )
        )
    return tuple(out)
