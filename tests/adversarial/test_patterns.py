"""Every regular expression ibdiag applies to text from outside runs in time linear in the text
(issue 42, item 1): logs, tool output, sysfs values, Slurm variables, flags, JSON repaired before
parsing. A quadratic pattern on a 32 KB line took 10 s (perftest's banner), a 133 KB log 114 s.

One test, one mechanism: :func:`tests.support.regexprobe.package_patterns` finds every pattern the
package compiles (module globals and the literal patterns of ``re.*`` calls in functions), and
:func:`~tests.support.regexprobe.attacks` builds crafted long texts from each pattern's own parse
tree; the lines a source really starts with (a kernel log's, an NCCL line's) are added for the
patterns of that source. Each text is timed at two lengths by CPU time, best of three."""

from __future__ import annotations

import re

import pytest

from ibdiag.history.kernlines import MAX_LINE, parse_line
from ibdiag.history.kernlog import match
from tests.support.regexprobe import Site, _cpu, attacks, growth, package_patterns

SITES, UNSEEN = package_patterns("ibdiag")

#: How kernel log lines start, so a filler lands where a kernel-log pattern could backtrack.
KERNEL_PREFIXES = [
    "mlx5_core 0000:47:00.0 ",
    "mlx5_core 0000:47:00.0: ",
    "mlx5_core 0000:47:00.0: port_module:1107:(pid 0): Port module event: module 0, ",
    "mlx5_core 0000:47:00.0: mlx5_cmd_out_err:838:(pid 1): ACCESS_REG(0x805) op_mod(0x1) failed, ",
    "pcieport 0000:00:1c.0: PCIe Bus Error: severity=",
    "mlx5_core 0000:47:00.1: 126.024 Gb/s available PCIe bandwidth, limited by ",
    "Dec  1 03:12:40 ",
    "2026-12-01T03:12:40 ",
    "-- Logs begin at Mon 2026-11-30 00:00:02 UTC, end at ",
    "[",
    "12,",
]
#: How NCCL's lines in a benchmark log start.
NCCL_PREFIXES = [
    "node01:61000:61020 [0] ",
    "NET/IB : Got completion from peer ",
    "NET/IB: Got completion from peer 10.0.0.2<5> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid",
    "NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 576 mtu 3 GID 3 (",
    "mlx5: node01: ",
    "00000000 ",
]
#: How the tools' lines start (ibdiag fabric: stdout and stderr, dumps and pastes).
FABRIC_PREFIXES = [
    "ibwarn: [4321] query_and_dump: PortCountersExtended query failed on ",
    "ibwarn: [4321] mad_rpc: _do_madrpc failed; dport (",
    "./libibnetdisc/query_smp.c:186; umad (DR path slid 0; dlid 0; 0,1",
    '0xb8cef603000a0002 "      leaf2"  3  7[  ] ==( 4X  53.125 Gbps Active/  LinkUp)==> ',
    "          2    1[  ] ==(",
    "GUID 0xb8cef603000a0001 port 1: [SymbolErrorCounter == 57",
    'Errors for 0xb8cef603000a0001 "',
    'Switch\t36 "S-b8cef603000a0001"\t\t# "',
    '[1]\t"H-0002c90300000100"[1](2c90300000101) \t\t# "',
    "Unicast lids [0x0-0x20] of switch Lid 20 guid 0xb8cef60300000006 (",
    "port 3 of leaf1 is Active, its far end was not discovered (",
]
FILLERS = ["a", " ", "0", "0:", "[ ", ", ", "1.", "x, ", ": ", "(pid 1): ", "-", "\t", "A_"]
SOURCE_PREFIXES = {
    "ibdiag.history.": KERNEL_PREFIXES,
    "ibdiag/history/": KERNEL_PREFIXES,
    "ibdiag.bench.importers.": NCCL_PREFIXES,
    "ibdiag/bench/importers/": NCCL_PREFIXES,
    "ibdiag.fabric.": FABRIC_PREFIXES,
    "ibdiag/fabric/": FABRIC_PREFIXES,
}


def _prefixes(where: str) -> list[str]:
    return next((p for key, p in SOURCE_PREFIXES.items() if where.startswith(key)), [])


def test_every_pattern_is_where_the_probe_sees_it() -> None:
    """A pattern built inside a function from run-time text would escape the timing below."""
    assert SITES and not UNSEEN, UNSEEN


@pytest.mark.parametrize("site", [pytest.param(s, id=s.where) for s in SITES])
def test_every_pattern_is_linear_on_crafted_long_texts(site: Site) -> None:
    """8x the text costs about 8x the time (a quadratic pattern: 64x); under 20 ms for the long
    text passes whatever the ratio. Searched and matched whole, as callers use them."""
    pattern = site.pattern
    tried = attacks(pattern) + [(p, f, "") for p in _prefixes(site.where) for f in FILLERS]
    for prefix, pump, suffix in tried:
        slow = growth(pattern, prefix, pump, suffix)
        assert slow is None, (
            f"{site.where}: {pattern.pattern!r:.80} on {prefix!r:.40} + {pump!r}*n + {suffix!r}: "
            f"{slow[0]}x the text took {slow[2] / slow[1]:.0f}x the time ({slow[1]:.4f}s -> {slow[2]:.4f}s)"
        )


@pytest.mark.parametrize("filler", FILLERS)
def test_a_kernel_line_of_a_megabyte_costs_no_more_than_its_first_kilobytes(filler: str) -> None:
    for prefix in ["", *KERNEL_PREFIXES]:
        huge = prefix + filler * (2**20 // len(filler))
        t = _cpu(lambda h=huge: match(parse_line(h) or parse_line("x")))  # type: ignore[arg-type]
        assert t < 0.05, f"{prefix[:30]!r} + {filler!r}: {t:.3f}s"
        line = parse_line(huge)
        assert line is None or len(line.message) <= MAX_LINE


def test_the_probe_finds_a_quadratic_pattern() -> None:
    """The probe itself: a known quadratic pattern (the old perftest banner key) is caught."""
    old_banner = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9 ._\-/]*?)\s*:\s+(?P<value>\S+)")
    assert ("A", "A", "") in attacks(old_banner)
    assert growth(old_banner, "A", "A", "", short=1024) is not None
    assert growth(re.compile(r"[A-Za-z]{1,32}:"), "A", "A", "", short=1024) is None
