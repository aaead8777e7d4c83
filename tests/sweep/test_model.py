"""The ibdiag.sweep/1 document: written from the model, read back checked, verdicts recomputed."""

from __future__ import annotations

import copy
import json

import pytest

from ibdiag.errors import InputError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.output.jsonout import render_json
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.model import PAIR_COLUMNS, SCHEMA, SweepResult
from ibdiag.sweep.nodes import make_fleet
from ibdiag.sweep.passes import run_sweep
from ibdiag.sweep.schedule import Pattern
from tests.support.synthetic_fabric import PlantedFaults, SyntheticFabric

META = RunMeta(host="head", version="0.1.0", generated_at="2026-12-01T00:00:00Z")


@pytest.fixture(scope="module")
def result():
    nodes = make_fleet([f"gpu-{i:02d}" for i in range(12)], ["mlx5_0", "mlx5_1"], rate_gbps=400)
    faults = PlantedFaults(slow_nodes={4: 0.5}, slow_links={(1, 8, 9): 0.5}, dead={2: 1})
    return run_sweep(
        nodes,
        SyntheticFabric(faults, noise=0.01, lat_us=2.0),
        pattern=Pattern.RANDOM,
        rounds=4,
        seed=9,
    )


def test_document_round_trips_through_json(result):
    doc = json.loads(
        render_json(Report("sweep", result.to_json(), tuple(sweep_findings(result))), META)
    )
    assert doc["schema"] == SCHEMA == "ibdiag.sweep/1" and doc["status"] == "fail"
    assert (
        doc["sweep"]["pattern"] == "random"
        and doc["sweep"]["random_rounds"] == 4
        and doc["sweep"]["tests"] == len(result.pairs)
    )
    assert doc["pairs"]["columns"] == list(PAIR_COLUMNS)
    row = doc["pairs"]["rows"][0]
    assert row[4] == result.adapter(row[3], row[2]) and row[6] == result.adapter(
        row[5], row[2]
    )  # adapters on both ends
    assert {n["status"] for n in doc["nodes"]} == {"ok", "bad", "unreachable"}
    assert all(
        link["verdict"] != "ok" for link in doc["links"]
    )  # only the interesting links are listed
    back = SweepResult.from_json(doc, "sweep.json")
    assert (
        back.pairs == result.pairs
        and back.nodes == result.nodes
        and back.settings == result.settings
    )
    assert back.analysis == result.analysis


def test_verdicts_are_recomputed_from_the_pairs_not_taken_from_the_file(result):
    doc = json.loads(json.dumps(result.to_json()))
    for node in doc["nodes"]:
        node["status"] = "ok"  # a file claiming everything is fine
    doc["links"] = []
    back = SweepResult.from_json(doc)
    assert back.analysis.nodes[4].status.value == "bad"


def _set(doc, path, value):
    cur = doc
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("sweep",), None, "sweep: must be an object"),
        (("sweep", "pattern"), "star", "sweep.pattern: must be one of"),
        (("sweep", "thresholds", "z_limit"), float("nan"), "z_limit: must be a finite number"),
        (("sweep", "bytes"), 0, "sweep.bytes: 0 is outside"),
        (("sweep", "engine"), "nccl", "sweep.engine: must be one of"),
        (("nodes", 0, "host"), "gpu\x1b[31m", "nodes[0].host: holds control"),
        (("nodes", 1, "rank"), 7, "nodes[1].rank: 7 is outside 1..1"),
        (("nodes", 0, "rails", 0, "adapter"), "mlx5 0", "is not of the expected form"),
        (("nodes", 0, "rails"), [], "has no rail"),
        (("pairs", "columns"), ["a", "b"], "pairs.columns: must be"),
        (("pairs", "rows", 0, 3), 99, "pairs.rows[0][3]: 99 is outside 0..11"),
        (("pairs", "rows", 0, 7), -1.0, "pairs.rows[0][7]: -1.0 is outside"),
        (("pairs", "rows", 0, 7), True, "pairs.rows[0][7]: must be a finite number"),
        (("pairs", "rows", 0, 4), "mlx5_9", "has no rail 0 with adapter 'mlx5_9'"),
        (("pairs", "rows", 0), [1, 2], "must be a list of 13 values"),
        (("pairs", "rows", 0, 11), "auto", "pairs.rows[0][11]: must be one of ibdiag, perftest"),
        (("sweep", "engine_requested"), "nccl", "sweep.engine_requested: must be one of"),
    ],
)
def test_a_bad_value_is_named_with_its_path(result, path, value, message):
    doc = copy.deepcopy(result.to_json())
    if path[:2] == ("pairs", "rows") and len(path) == 4 and path[3] == 4:
        doc["pairs"]["rows"][0][2] = 0
        doc["pairs"]["rows"][0][4] = value
    else:
        _set(doc, path, value)
    with pytest.raises(InputError, match=r"^sweep.json: ") as e:
        SweepResult.from_json(doc, "sweep.json")
    assert message in e.value.message


def test_a_self_test_is_refused(result):
    doc = copy.deepcopy(result.to_json())
    row = doc["pairs"]["rows"][0]
    row[5], row[6] = row[3], row[4]
    with pytest.raises(InputError, match="against itself"):
        SweepResult.from_json(doc)


def _with_engines(result, requested, engines):
    """The result as if its pairs had been measured by ``engines`` (cycled) under ``--engine requested``."""
    from dataclasses import replace

    pairs = tuple(
        replace(p, engine=None if p.unreachable else engines[i % len(engines)])
        for i, p in enumerate(result.pairs)
    )
    return replace(
        result,
        settings=replace(result.settings, spec=replace(result.settings.spec, engine=requested)),
        pairs=pairs,
    )


@pytest.mark.parametrize(
    ("requested", "engines", "summed"),
    [
        ("auto", ["ibdiag", "perftest"], "ibdiag+perftest"),
        ("auto", ["perftest"], "perftest"),
        ("perftest", ["perftest"], "perftest"),
        ("ibdiag", ["ibdiag"], "ibdiag"),
    ],
)
def test_each_pair_records_the_engine_that_measured_it(result, requested, engines, summed):
    """``--engine auto`` lets every measuring node choose: the document says per pair what measured it
    and sums that up in ``sweep.engine`` ("auto" is only the option, ``sweep.engine_requested``)."""
    from ibdiag.sweep.views import CSV_HEADER, csv_rows, summary_lines

    mixed = _with_engines(result, requested, engines)
    doc = json.loads(json.dumps(mixed.to_json()))
    assert doc["sweep"]["engine"] == summed and doc["sweep"]["engine_requested"] == requested
    measured = [row for row in doc["pairs"]["rows"] if not row[10]]
    assert {row[11] for row in measured} == set(engines) and all(
        row[11] is None for row in doc["pairs"]["rows"] if row[10]
    )
    back = SweepResult.from_json(doc)
    assert (
        back.pairs == mixed.pairs
        and back.settings.spec.engine == requested
        and back.engine == summed
    )
    rows = csv_rows(back)
    assert CSV_HEADER[-2:] == ("engine", "shared") and [r["engine"] for r in rows] == [
        p.engine for p in mixed.pairs
    ]
    assert summary_lines(back)[0].endswith(
        f"(p2p, rdma, {summed})" if "perftest" in summed else "(p2p, rdma)"
    )


def test_no_pair_engine_is_a_null_sweep_engine(result):
    """The synthetic fabric (and a collective sweep) names no engine: ``sweep.engine`` is null."""
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["sweep"]["engine"] is None and {row[11] for row in doc["pairs"]["rows"]} == {None}
    assert SweepResult.from_json(doc).engine is None


@pytest.mark.parametrize(
    ("old_engine", "pair_engine"),
    [("perftest", "perftest"), ("ibdiag", "ibdiag"), ("auto", None), (None, "ibdiag")],
)
def test_older_files_without_per_pair_engines_read(result, old_engine, pair_engine):
    """Files written before each pair recorded its engine: ``sweep.engine`` was the option (absent
    before --engine: ibdiag's) and ``pairs`` had 11 columns. Each pair's engine is that option where it
    names one; "auto" did not say what each node chose: unknown."""
    doc = json.loads(json.dumps(result.to_json()))
    del doc["sweep"]["engine_requested"]
    if old_engine is None:
        del doc["sweep"]["engine"]  # written before sweep had --engine
    else:
        doc["sweep"]["engine"] = old_engine
    doc["pairs"]["columns"] = doc["pairs"]["columns"][:11]
    doc["pairs"]["rows"] = [row[:11] for row in doc["pairs"]["rows"]]
    back = SweepResult.from_json(doc)
    assert back.settings.spec.engine == (old_engine or "ibdiag")
    assert {p.engine for p in back.pairs if not p.unreachable} == {pair_engine}
    assert {p.engine for p in back.pairs if p.unreachable} <= {None}
    assert back.engine == pair_engine
