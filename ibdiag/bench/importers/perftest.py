"""perftest (``ib_write_bw``, ``ib_read_lat`` ...) output -> :class:`BenchRun` (``kind: p2p``).

Pure functions of text. Facts (``shared/reference/FORMATS.md``, perftest ``perftest_parameters.c``):

* bandwidth header ``#bytes  #iterations  BW peak[MiB/sec]  BW average[MiB/sec]  MsgRate[Mpps]``;
  ``[MB/sec]`` before mid-2024 means the same 2^20 B/s (perftest divides by 0x100000); ``[Gb/sec]``
  (``--report_gbits``) is 1e9 bit/s (it divides by 125,000,000 B/s). Values below 0.1 Gb/s print with 6
  decimals; rows may contain tabs;
* duration mode (``-D``) and some others print ``BW peak`` 0.00: "not measured", kept as None;
* latency header ``#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
  t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]``, with ``-D`` ``#bytes #iterations
  t_avg[usec] tps average``. perftest reports write and send latency one way (round trip / 2) and
  read and atomic latency as the full round trip (its ``rtt_factor``); values are kept as printed and
  the run's ``latency`` says which;

* numbers in markdown emphasis (``**5544.28**``, cleaned by :mod:`~ibdiag.bench.importers.lines`);
* an error line where the table should be, or among its rows (``Couldn't connect to 10.0.0.2:18515``,
  ``Failed to modify QP 1234 to RTR``, ``Completion with error at client``): the run is read with its
  ``provenance.failure`` (the ``import.run_failed`` finding) and whatever rows came before it.

``--out_json`` files are :mod:`~ibdiag.bench.importers.perftest_json`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ibdiag.bench.importers.context import Context
from ibdiag.bench.importers.lines import Line, number
from ibdiag.bench.results.model import BenchRun, LatencyStats, P2PResult
from ibdiag.bench.results.p2p_meta import P2PMeta, PerftestLog
from ibdiag.bench.results.provenance import ImportInfo, Provenance, RunPosition
from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt

HINT = "ibdiag bench import reads perftest ib_*_bw / ib_*_lat output and --out_json files; remove unrelated lines"

MIB = 2**20
"""perftest's MB/sec and MiB/sec: 0x100000 B/s."""
GBIT = 125_000_000
"""perftest's Gb/sec: 1e9 bit/s = 1.25e8 B/s."""

_SEPARATOR = re.compile(r"^-{10,}$")
_TITLE = re.compile(r"^(?P<title>[A-Za-z_]+(?: [A-Za-z_]+)*?) (?P<kind>BW|Latency) Test$")
_COLUMN = re.compile(
    r"#bytes|#iterations|BW (?:peak|average)\[[^\]]{1,16}\]|MsgRate\[[^\]]{1,16}\]|t_\w{1,16}\[[^\]]{1,16}\]"
    r"|(?<![\d.])[\d.]{1,8}% percentile\[[^\]]{1,16}\]|tps average|CPU_Util\[[^\]]{1,16}\]|\bSL\b"
)
#: A banner entry, ``Number of qps   : 1`` (a key of words, padded, a colon, a value); several share a
#: line, tab-separated. Each part is bounded and no two overlap, so finding them all is linear.
_KV = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z0-9._\-/*]{0,31}(?: [A-Za-z0-9._\-/*]{1,31}){0,5})[ \t]{0,32}:[ \t]{1,32}(?P<value>\S{1,128})"
)
#: Longest line read as a banner line (perftest's are under 80 characters).
_MAX_BANNER_LINE = 512
_FAIL = re.compile(
    r"^(?:Couldn't|Could not|Can't|Unable to|Failed to|Failed status \d+|Completion with error|Problems with)\b"
)
#: Error lines only perftest prints (they mark a log as perftest's when no table follows them).
_FAIL_MARK = re.compile(
    r"^(?:Couldn't connect to|Failed to modify QP\b.*\bto (?:RTR|RTS|INIT)|Completion with error at|"
    r"Failed status \d+: wr_id|Unable to Connect the HCA's through the link|Couldn't get device info|"
    r"Unable to open file descriptor for socket connection)"
)
_NUMBER = re.compile(r"^\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
#: The banner's keys (perftest ``ctx_print_test_info``), lower case; other ``key : value`` lines are not perftest's.
_BANNER_KEYS = frozenset(
    {
        "dual-port", "device", "number of qps", "transport type", "connection type", "using srq", "pcie relax order",
        "lock-free", "ibv_wr* api", "using enhanced reorder", "tx depth", "rx depth", "post list", "recv post list",
        "cq moderation", "cqe poll batch", "mtu", "link type", "buffer size", "gid index", "gid index2",
        "max inline data", "outstand reads", "rdma_cm qps", "data ex. method",
    }
)  # fmt: skip


@dataclass
class _Run:
    start_line: int
    title: str | None = None
    verb: str | None = None
    mode: str | None = None
    bidirectional: bool = False
    banner: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    columns: list[str] | None = None
    header_line: int | None = None
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    header_cut: bool = False
    duration: bool = False
    """perftest said "BW peak won't be measured in this run" (duration mode, ``-D``)."""
    failure: str | None = None
    """perftest's error line (``line 20: Couldn't connect to 10.0.0.2:18515``): the run failed."""


def verb_of(title: str) -> str | None:
    """``RDMA_Write BW Test`` -> ``write`` (read, send, atomic), as the title names the verb."""
    low = title.lower()
    for key, verb in (
        ("rdma_write", "write"),
        ("rdma_read", "read"),
        ("send", "send"),
        ("atomic", "atomic"),
        ("write", "write"),
        ("read", "read"),
    ):
        if key in low:
            return verb
    return None


def marks(line: Line) -> bool:
    """True when the line is a perftest marker (a ``#bytes`` header, a title, an address line)."""
    s = line.text.strip()
    if (
        s.startswith("#bytes")
        or _TITLE.match(s)
        or s.startswith(("local address:", "remote address:"))
        or _FAIL_MARK.match(s)
    ):
        return True
    tokens = s.split()
    return (
        bool(tokens)
        and not line.truncated
        and _numeric(tokens)
        and _cut_columns(tokens) is not None
    )


def looks_like(lines: Sequence[Line]) -> bool:
    """True when the text carries a perftest marker line."""
    return any(marks(ln) for ln in lines[:4000])


def _unit_of(columns: list[str]) -> tuple[str | None, float | None]:
    for c in columns:
        if c.startswith("BW average["):
            unit = c[len("BW average[") : -1]
            if unit in ("MiB/sec", "MB/sec"):
                return unit, MIB
            if unit == "Gb/sec":
                return unit, GBIT
            return unit, None
    return None, None


def _results(run: _Run, source: str) -> list[P2PResult]:
    cols = run.columns or []
    unit, scale = _unit_of(cols)
    out: list[P2PResult] = []
    for line_no, tokens in run.rows:
        vals = dict(zip(cols, tokens, strict=False))
        where = f"{source}:{line_no}"
        nbytes = int(number(vals["#bytes"], where, "#bytes", HINT))
        iters = int(number(vals.get("#iterations", "0"), where, "#iterations", HINT))
        if run.mode == "bw":
            out.append(_bw_row(vals, where, nbytes, iters, unit, scale, run, source))
        else:
            out.append(_lat_row(vals, where, nbytes, iters, run, source))
    return out


def _bw_row(
    vals: dict[str, str],
    where: str,
    nbytes: int,
    iters: int,
    unit: str | None,
    scale: float | None,
    run: _Run,
    source: str,
) -> P2PResult:
    """A bandwidth table's row (GB/s from the table's unit; a peak of 0.00 is one not measured)."""
    if scale is None:
        raise InputError(
            f"{source}:{run.header_line}: unknown bandwidth unit {unit!r}",
            hint="perftest prints MiB/sec, MB/sec or Gb/sec",
        )
    avg = number(vals[f"BW average[{unit}]"], where, "BW average", HINT) * scale / 1e9
    peak_raw = vals.get(f"BW peak[{unit}]")
    peak = None
    if peak_raw is not None:
        p = number(peak_raw, where, "BW peak", HINT)
        # 0.00: not measured (perftest says "BW peak won't be measured in this run"; FORMATS.md)
        peak = None if p == 0 else p * scale / 1e9
    rate = vals.get("MsgRate[Mpps]")
    return P2PResult(
        bytes=nbytes,
        iters=iters,
        bw_gbs=avg,
        bw_peak_gbs=peak,
        msg_rate_mpps=None if rate is None else number(rate, where, "MsgRate", HINT),
    )


def _lat_row(
    vals: dict[str, str], where: str, nbytes: int, iters: int, run: _Run, source: str
) -> P2PResult:
    """A latency table's row: the percentiles, or (duration mode) the average and the rate only."""
    if "t_typical[usec]" in vals:
        need = (
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]",
        )
        missing = [c for c in need if c not in vals]
        if missing:
            raise InputError(
                f"{source}:{run.header_line}: latency header without {', '.join(missing)}",
                hint="perftest 4.x and later print all percentiles; older output is not supported",
            )
        lat = LatencyStats(
            min_us=number(vals["t_min[usec]"], where, "t_min", HINT),
            p50_us=number(vals["t_typical[usec]"], where, "t_typical", HINT),
            p99_us=number(vals["99% percentile[usec]"], where, "99%", HINT),
            p999_us=number(vals["99.9% percentile[usec]"], where, "99.9%", HINT),
            max_us=number(vals["t_max[usec]"], where, "t_max", HINT),
            avg_us=number(vals["t_avg[usec]"], where, "t_avg", HINT)
            if "t_avg[usec]" in vals
            else None,
        )
        return P2PResult(bytes=nbytes, iters=iters, lat_us=lat)
    if "t_avg[usec]" in vals:  # duration mode: the average and transactions per second only
        tps = vals.get("tps average")
        return P2PResult(
            bytes=nbytes,
            iters=iters,
            msg_rate_mpps=None if tps is None else number(tps, where, "tps average", HINT) / 1e6,
            lat_avg_us=number(vals["t_avg[usec]"], where, "t_avg", HINT),
        )
    raise InputError(
        f"{source}:{run.header_line}: latency header without t_typical or t_avg", hint=HINT
    )


def _bench_run(
    run: _Run, ctx: Context, source: str, index: int, count: int, skipped: int
) -> BenchRun:
    results = _results(run, source)
    unit, _ = _unit_of(run.columns or [])
    b = run.banner
    command = ctx.command_for(run.start_line)
    duration = run.mode == "bw" and any(r.bw_peak_gbs is None for r in results) and bool(results)
    by_command = command is not None and "duration_s" in command.options
    verb = run.verb
    bw = run.mode == "bw"
    test = f"ib_{verb or 'unknown'}_{'bw' if bw else 'lat'}"
    if (verb is None or run.mode is None) and command is not None and command.binary:
        test = command.binary  # a run that failed before its banner: the command names the test
        verb, bw = verb_of(test.replace("ib_", "rdma_")), test.endswith("_bw")
    log = PerftestLog(
        test=test,
        title=run.title,
        verb=verb,
        device=b.get("device"),
        link_layer=b.get("link type"),
        mtu=b.get("mtu"),
        connection=b.get("connection type"),
        qps=b.get("number of qps"),
        gid_index=b.get("gid index"),
        local_address=run.addresses.get("local"),
        remote_address=run.addresses.get("remote"),
        bw_unit=unit if bw else None,
        peak_measured=(not duration) if bw else None,
        latency=None
        if bw
        else ("round trip" if verb in ("read", "atomic") else "one way (round trip / 2)"),
        duration_mode=True
        if (not bw and results and all(r.lat_us is None for r in results))
        or (bw and (run.duration or by_command))
        else None,
        post_list=b.get("post list"),
        header=("cut: from the rows" if run.header_cut else None),
    )
    position = RunPosition(index, count, "one after the other") if count > 1 else None
    imported = ImportInfo(
        tool="perftest", source=source, first_line=run.start_line, position=position
    )
    provenance = Provenance(
        imported=imported,
        command=command,
        skipped_lines=(skipped + len(ctx.commands)) or None,
        failure=run.failure,
    )
    bidir = run.bidirectional or (
        command is not None and command.options.get("bidirectional") is True
    )
    return BenchRun(
        P2PMeta(
            transport="rdma", mode=run.mode or ("bw" if bw else "lat"), bidir=bidir, perftest=log
        ),
        tuple(results),
        provenance,
    )


def _cut_columns(tokens: list[str]) -> list[str] | None:
    """The columns of a row pasted without its ``#bytes`` header, when its shape says them: 9 cells are
    the latency table (t_min ... 99.9%), 5 the bandwidth table (its unit is told from MsgRate)."""
    if len(tokens) == 9:
        return [
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]",
        ]
    if len(tokens) == 5:
        try:
            size, avg, rate = float(tokens[0]), float(tokens[3]), float(tokens[4])
        except ValueError:
            return None
        if size > 0 and avg > 0 and rate > 0:
            bps = rate * 1e6 * size
            for unit, scale in (("MiB/sec", MIB), ("Gb/sec", GBIT)):
                if abs(avg * scale / bps - 1) < 0.1:
                    return [
                        "#bytes",
                        "#iterations",
                        f"BW peak[{unit}]",
                        f"BW average[{unit}]",
                        "MsgRate[Mpps]",
                    ]
    return None


def _numeric(tokens: list[str]) -> bool:
    return tokens[0].isdigit() and all(_NUMBER.match(t) for t in tokens)


class _Reader:
    """The runs read so far, the one being read, and how many lines were not perftest's."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.runs: list[_Run] = []
        self.cur: _Run | None = None
        self.skipped = 0

    def new(self, number: int) -> _Run:
        r = _Run(number)
        self.runs.append(r)
        self.cur = r
        return r

    def feed(self, ln: Line) -> None:
        s = ln.text.strip()
        n = ln.number
        if not s or _SEPARATOR.match(s) or s.startswith("*"):
            return
        if ln.truncated:
            self.skipped += 1
            return
        m = _TITLE.match(s)
        if m:
            self._title(m, s, n)
        elif s.startswith("#bytes"):
            self._header(s, n)
        elif _numeric(s.split()):
            self._row(s.split(), n)
        else:
            self._other(s, n)

    def _title(self, m: re.Match[str], s: str, n: int) -> None:
        cur = self.cur
        if cur is None or cur.title is not None or cur.columns is not None:
            cur = self.new(n)
        cur.title = s
        cur.verb = verb_of(m.group("title"))
        cur.mode = "bw" if m.group("kind") == "BW" else "lat"
        cur.bidirectional = "Bidirectional" in m.group("title")

    def _header(self, s: str, n: int) -> None:
        cols = _COLUMN.findall(s)
        leftover = _COLUMN.sub("", s).strip()
        if leftover:
            raise InputError(
                f"{self.source}:{n}: unknown perftest column(s) {safe_excerpt(leftover, 80)}",
                hint=HINT,
            )
        cur = self.cur
        if cur is None or cur.columns is not None:
            cur = self.new(n)
        cur.columns, cur.header_line = cols, n
        if cur.mode is None:
            cur.mode = "bw" if any(c.startswith("BW average") for c in cols) else "lat"

    def _row(self, tokens: list[str], n: int) -> None:
        cur = self.cur
        if cur is None or cur.columns is None:
            cols = _cut_columns(tokens)
            if cols is None:
                self.skipped += 1
                return
            if cur is None:
                cur = self.new(n)
            cur.columns, cur.header_line, cur.header_cut = cols, n, True
            cur.mode = cur.mode or ("bw" if len(cols) == 5 else "lat")
        if len(tokens) != len(cur.columns):
            raise InputError(
                f"{self.source}:{n}: expected {len(cur.columns)} columns as in the header (line {cur.header_line}), found {len(tokens)}",
                hint=HINT,
            )
        cur.rows.append((n, tokens))

    def _other(self, s: str, n: int) -> None:
        """Addresses, the duration-mode note, the banner's key/value lines, an error; else skipped."""
        if s.startswith(("local address:", "remote address:")):
            cur = self.cur if self.cur is not None else self.new(n)
            cur.addresses[s.split()[0]] = s.split(":", 1)[1].strip()[:200]
            return
        if s.startswith("GID:"):
            return
        if _FAIL.match(s):
            if self.cur is not None and self.cur.failure is not None:
                return  # the lines after the first (Failed status ..., scnt=...) say the same
            failed = self.cur if self.cur is not None else self.new(n)
            failed.failure = f"line {n}: {s[:200]}"
            return
        if "BW peak won't be measured" in s:
            cur = self.cur if self.cur is not None else self.new(n)
            cur.duration = True
            return
        pairs = (
            [(k.strip().lower(), v) for k, v in _KV.findall(s)]
            if len(s) <= _MAX_BANNER_LINE
            else []
        )
        known = [(k, v) for k, v in pairs if k in _BANNER_KEYS]
        if known and len(known) == len(pairs):
            run = self.cur
            if run is None or run.rows:
                run = self.new(n)
            for key, value in known:
                run.banner[key] = value[:100]
            return
        self.skipped += 1


def parse_lines(
    lines: Iterable[Line],
    ctx: Context,
    source: str = "<text>",
    *,
    op: str | None = None,
    file_name: str | None = None,
) -> list[BenchRun]:
    """Every perftest run in the lines (a new title or table header starts one); lines that are not
    perftest's are skipped and counted. ``op`` and ``file_name`` are the importers' common arguments,
    which a perftest log does not need."""
    reader = _Reader(source)
    for ln in lines:
        reader.feed(ln)
    runs = [r for r in reader.runs if r.columns is not None or r.failure is not None]
    if not runs:
        raise InputError(f"{source}: no perftest result table (#bytes header) found", hint=HINT)
    return [
        _bench_run(r, ctx, source, i, len(runs), reader.skipped)
        for i, r in enumerate(runs, start=1)
    ]


def parse_log(
    text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None
) -> list[BenchRun]:
    """Every perftest run in ``text`` (see :func:`parse_lines`)."""
    ctx = Context()
    return parse_lines(
        ctx.table_lines(text.splitlines()),
        ctx,
        source,
        op=op,
        file_name=file_name,
    )
