"""The live collector's plumbing with a recording runner: the commands it runs (one discovery, the rest
from its cache), -C/-P, the time limits, a tool killed at its limit, a tool that died by a signal."""

from __future__ import annotations

import os

import pytest

from ibdiag.errors import CannotRunError
from ibdiag.fabric.collect import Collector, Limits, collect


class Recorder:
    """A FAKE runner (no subnet here): records each command and answers from a script; like the real
    ibnetdiscover, it writes the cache file named after --cache."""

    def __init__(self, answers: dict[str, list[tuple[str, str, int | None]]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv, env, timeout_s):
        self.calls.append((list(argv), timeout_s))
        if "--cache" in argv:
            with open(argv[argv.index("--cache") + 1], "w") as f:
                f.write("cache")
        tool = os.path.basename(argv[0])
        queue = self.answers.get(tool, [("", "", 0)])
        out, err, rc = queue.pop(0) if len(queue) > 1 else queue[0]
        return out, err, rc, 0.01


def test_one_discovery_then_queries_from_its_cache_with_the_port_selected():
    rec = Recorder(
        {"saquery": [("\t\tEndPortLid..............1\n\t\tEndPortLid..............7\n", "", 0)]}
    )
    cap = collect(Collector(os.environ, ca="mlx5_2", port=1, limits=Limits(30, 20, 5), runner=rec))
    calls = [(os.path.basename(a[0]), a[1:], t) for a, t in rec.calls if a[1:] != ["--version"]]
    assert [c[0] for c in calls].count("ibnetdiscover") == 1 and calls[0][0] == "ibnetdiscover"
    assert all(args[:4] == ["-C", "mlx5_2", "-P", "1"] for _, args, _ in calls)
    assert all(
        "--load-cache" in args for tool, args, _ in calls if tool in ("iblinkinfo", "ibqueryerrors")
    )
    assert [r.name for r in cap.runs] == [
        "ibnetdiscover",
        "iblinkinfo",
        "ibqueryerrors",
        "sminfo",
        "saquery",
        "sminfo-1",
        "sminfo-7",
    ]
    limit = {(tool, args[-1]): t for tool, args, t in calls}
    assert limit[("ibnetdiscover", calls[0][1][-1])] == 30 and limit[("sminfo", "7")] == 5
    assert next(t for tool, _, t in calls if tool == "ibqueryerrors") == 20


def test_a_tool_that_died_by_a_signal_runs_once_more_and_a_timeout_is_kept():
    rec = Recorder({"ibqueryerrors": [("", "", -11), ("", "", 0)], "iblinkinfo": [("", "", None)]})
    cap = collect(Collector(os.environ, runner=rec))
    assert cap.run("ibqueryerrors").rc == 0  # type: ignore[union-attr]
    assert sum(1 for a, _ in rec.calls if a[0].endswith("ibqueryerrors")) == 2
    assert cap.run("iblinkinfo").rc is None  # type: ignore[union-attr]


def test_missing_infiniband_diags_is_exit_3_with_the_install_hint(monkeypatch):
    import ibdiag.fabric.collect as collect_module

    monkeypatch.setattr(collect_module, "SBIN", "/nonexistent")
    with pytest.raises(CannotRunError, match="ibnetdiscover is not installed") as e:
        collect(Collector({"PATH": "/nonexistent"}, runner=Recorder({})))
    assert e.value.hint and "infiniband-diags" in e.value.hint


def test_the_tools_are_found_in_sbin_when_path_lacks_it():
    # cron's PATH is /usr/bin:/bin and Debian installs infiniband-diags in /usr/sbin
    rec = Recorder({})
    collect(Collector({"PATH": "/usr/bin:/bin"}, runner=rec))
    assert rec.calls[0][0][0] in (
        "/usr/sbin/ibnetdiscover",
        "/sbin/ibnetdiscover",
        "/usr/bin/ibnetdiscover",
    )


def test_discovery_and_link_states_are_handed_over_while_the_counters_query_still_runs():
    import threading

    counters_done = threading.Event()
    seen: list[tuple[str, bool]] = []

    class Slow(Recorder):
        def __call__(self, argv, env, timeout_s):
            if os.path.basename(argv[0]) == "ibqueryerrors":
                threading.Event().wait(0.3)
                counters_done.set()
            return super().__call__(argv, env, timeout_s)

    def early(run):
        seen.append((run.name, counters_done.is_set()))
        raise ValueError("a parse error is the build's to report")

    rec = Slow({"ibnetdiscover": [("# a dump\n", "", 0)]})
    cap = collect(Collector(os.environ, runner=rec, early=early))
    assert seen == [("ibnetdiscover", False), ("iblinkinfo", False)]
    assert cap.run("ibnetdiscover").stdout == "# a dump\n" and cap.run("ibqueryerrors") is not None
