"""Host lists (issue 42, item 6): ``--nodes``, ``$SLURM_JOB_NODELIST``, ``SLURM_TASKS_PER_NODE`` and
``srun -w`` in a log come from outside. The 100,000-name cap applied per range, not to the list
(1.6 KB of input reached 1.4 GB), and ``gpu[1-²]`` or a 5000-digit range end was an internal
ValueError. Now one budget is checked before anything is built, and each is a usage error (exit 2)
with a hint."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from ibdiag import hostlists
from ibdiag.errors import InputError, UsageError
from ibdiag.fabric import nodelist
from ibdiag.runtime.launch import expand_nodelist, first_node, parse_tasks_per_node
from tests.support.cli import run_cli
from tests.support.env import REPO

#: 1.6 KB that stood for 16 million names, one range of 99,999 each.
WIDE = ",".join(f"n{i}[00001-99999]" for i in range(160))
#: Each range small, their product huge: 8 groups of 10 -> 10^8 names in 40 characters.
DEEP = "n" + "[0-9]" * 8
HOSTILE = {
    "many ranges": WIDE,
    "ranges multiplied": DEEP,
    "a superscript two": "gpu[1-\u00b2]",
    "Arabic-Indic digits": "gpu[\u0661-\u0663]",
    "a 5000-digit range end": "gpu[1-" + "9" * 5000 + "]",
    "a 5000-digit single number": "gpu[" + "9" * 5000 + "]",
    "bracket groups past Python's recursion": "n" + "[1]" * 2000,
    "an escape sequence": "gpu\x1b]0;owned\x07[1-2]",
    "a name longer than a host name": "g" * 300,
    "a huge text": "a," * 3_000_000,
}
VERDICT = [
    "verdict",
    "--params",
    "8e9",
    "--dtype",
    "bf16",
    "--ranks",
    "32",
    "--ranks-per-node",
    "2",
]
VERDICT += [
    "--compute-s",
    "2",
    "--busbw",
    "24",
    "--fabric",
    str(REPO / "fixtures" / "fabric" / "two-to-one.net"),
]


@pytest.mark.parametrize("what", list(HOSTILE))
def test_a_hostile_host_list_is_refused_before_it_is_built(what: str) -> None:
    text = HOSTILE[what]
    tracemalloc.start()
    t0 = time.process_time()
    try:
        with pytest.raises(InputError) as fabric_err:
            nodelist.expand(text)
        with pytest.raises(UsageError) as launch_err:
            expand_nodelist(text)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.process_time() - t0 < 2.0
    assert peak < 64 * 2**20, f"{peak >> 20} MiB"
    for err in (fabric_err.value, launch_err.value):
        assert err.hint and len(str(err)) < 400, str(err)
        assert not any(c in str(err) for c in "\x1b\x07"), str(err)


def test_the_names_are_counted_without_building_them() -> None:
    assert hostlists.count(WIDE) == 160 * 99_999
    assert hostlists.count(DEEP) == 10**8
    assert first_node("gpu[00001-99999],login[1-999999999999]") == "gpu00001"


def test_a_list_within_the_budget_is_read_as_slurm_reads_it() -> None:
    assert len(nodelist.expand("n[00001-99999],m1")) == 100_000
    assert nodelist.expand_all(["gpu[01-02]", "gpu02,gpu03"]) == ["gpu01", "gpu02", "gpu03"]
    with pytest.raises(InputError, match="more than the 100000"):
        nodelist.expand_all(["n[00001-60000]", "m[00001-60000]"])


def test_tasks_per_node_cannot_ask_for_a_billion_nodes() -> None:
    assert parse_tasks_per_node("8(x2),4") == [8, 8, 4]
    with pytest.raises(UsageError, match="more than 100000"):
        parse_tasks_per_node("1(x999999999)")
    with pytest.raises(UsageError):
        parse_tasks_per_node("1(x" + "9" * 5000 + ")")


@pytest.mark.parametrize("what", ["many ranges", "a superscript two", "a 5000-digit range end"])
def test_the_command_line_says_so_with_exit_2(what: str) -> None:
    """``verdict --fabric DUMP --nodes LIST`` and the default, ``$SLURM_JOB_NODELIST``."""
    for args, env in (
        (["--nodes", HOSTILE[what]], {}),
        ([], {"SLURM_JOB_NODELIST": HOSTILE[what]}),
    ):
        t0 = time.process_time()
        res = run_cli(*VERDICT, *args, env=env)
        assert time.process_time() - t0 < 5.0
        assert res.exit_code == 2, (res.exit_code, res.stderr[-400:])
        assert "internal error" not in res.stderr and "host list" in res.stderr, res.stderr[-400:]
        assert "hint:" in res.stderr


def test_a_rank_order_file_has_one_budget_of_names_for_all_its_lines(tmp_path):
    """verdict --rank-order FILE: each line a host list; 40 lines of 5,000 names each stand for 200,000
    names, more than the one budget of the whole file (it was 100,000 per line)."""
    from ibdiag.errors import ExitStatus, IbdiagError
    from ibdiag.verdict.onfabric import read_order

    order = tmp_path / "order"
    order.write_text("".join(f"g{i}x[00001-05000]\n" for i in range(40)))
    with pytest.raises(IbdiagError, match="100000") as refused:
        read_order(str(order))
    assert refused.value.exit_status == ExitStatus.USAGE
    order.write_text("gpu[01-04]\n# a comment\ngpu02\ngpu05\n")
    assert read_order(str(order)) == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]
