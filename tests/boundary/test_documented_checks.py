"""Every health-check line the project documents passes on its healthy node (issue 38): NHC drained the
healthy ``dgx-h100`` fixture with the documented ``check_ibdiag topo --expect-adapters 8 --expect-rate
400`` (its four 200 Gb/s storage ports). The lines are read from the README, docs/operations.md,
docs/topo.md and contrib/ — code blocks, the NHC, cron and wrapper files — and each ``ibdiag topo`` /
``ibdiag counters`` run on "this node" (no ``--root`` of its own) runs on the healthy fixture instead:
it must exit 0. Files the lines name (the config, a textfile, an NCCL environment) are this checkout's
or the test's."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.env import REPO, SYSFS_FIXTURES

HEALTHY = SYSFS_FIXTURES / "dgx-h100"
DOCS = ("README.md", "docs/operations.md", "docs/topo.md")
CONTRIB = (
    "contrib/nhc/ibdiag.nhc",
    "contrib/cron/ibdiag",
    "contrib/npd/ibdiag-plugin-monitor.json",
)
COMMANDS = ("topo", "counters")
_SHELL_END = {";", "||", "&&", "|", ">", ">>", "2>", "&", "2>&1", ">/dev/null"}


def _markdown_lines(text: str) -> list[str]:
    """Lines inside ``` fences, and inline code spans that run ibdiag (`ibdiag topo --strict`)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            out.append(line)
        else:
            out += re.findall(r"`((?:check_)?ibdiag [^`]+)`", line)
    return out


def _contrib_lines(name: str) -> list[str]:
    """The cron file's jobs, the NHC check's documented nhc.conf lines (comments), NPD's rules."""
    text = (REPO / name).read_text()
    if name.endswith(".json"):
        rules = json.loads(text)["rules"]
        return [shlex.join(["ibdiag", *rule["args"]]) for rule in rules]
    if name.endswith(".nhc"):
        return [line.lstrip("# ") for line in text.splitlines() if "|| check_ibdiag" in line]
    return [line for line in text.splitlines() if not line.startswith("#")]


def _argv(line: str) -> list[str] | None:
    """``ibdiag topo ...`` / ``check_ibdiag ...`` (NHC: default ``topo``) / a cron job -> ibdiag's
    arguments up to the first shell operator; None for a line that runs neither topo nor counters."""
    m = re.search(r"(?:^|\s|\|\|\s)(check_ibdiag|ibdiag)(\s.*)?$", line)
    if not m:
        return None
    try:
        words = shlex.split((m.group(2) or "").split("#", 1)[0])
    except ValueError:
        return None
    args = []
    for w in words:
        if w in _SHELL_END or w.startswith((">", "2>")):
            break
        args.append(w)
    if m.group(1) == "check_ibdiag" and (not args or args[0].startswith("-")):
        args = ["topo", *args]
    if not args or args[0] not in COMMANDS:
        return None
    return args


def documented_checks() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for name in DOCS + CONTRIB:
        if name.startswith("contrib/"):
            lines = _contrib_lines(name)
        else:
            lines = _markdown_lines((REPO / name).read_text())
        for line in lines:
            args = _argv(line.strip().lstrip("$ "))
            if args is not None and "--root" not in args and (name, args) not in found:
                found.append((name, args))
    # the Slurm wrapper: each of CHECKS with -o line and the shipped ARGS
    conf = dict(
        line.split("=", 1)
        for line in (REPO / "contrib/etc/healthcheck.conf").read_text().splitlines()
        if re.match(r"^[A-Z_]+=", line)
    )
    for check in conf["CHECKS"].strip('"').split():
        found.append(
            (
                "contrib/etc/healthcheck.conf",
                [check, "-o", "line", *shlex.split(shlex.split(conf["ARGS"])[0])],
            )
        )
    return found


CHECKS = documented_checks()


def test_the_documents_have_the_lines_this_test_runs():
    where = {name for name, _ in CHECKS}
    assert where == {*DOCS, *CONTRIB, "contrib/etc/healthcheck.conf"}, where
    # the NHC line that drained healthy nodes is there, now about the GPU-facing adapters
    nhc = [
        args for name, args in CHECKS if name == "docs/operations.md" and "--expect-rate" in args
    ]
    assert nhc and all("--expect-on" in args for args in nhc)


def _local(args: list[str], tmp_path: Path) -> list[str]:
    """The files a line names, made real: the shipped config, a textfile or JUnit file in tmp_path,
    an NCCL environment that is this node's own advice."""
    out = []
    for a in args:
        if a == "/etc/ibdiag/ibdiag.toml":
            a = str(REPO / "contrib/etc/ibdiag.toml")
        elif a.endswith(".prom") or a.endswith(".xml"):
            a = str(tmp_path / Path(a).name)
        elif a == "job.env":
            env = tmp_path / "job.env"
            env.write_text(
                "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1\n"
            )
            a = str(env)
        out.append(a)
    return [*out, "--root", str(HEALTHY)]


@pytest.mark.parametrize("where,args", CHECKS, ids=[f"{w}:{' '.join(a)}" for w, a in CHECKS])
def test_a_documented_check_passes_on_the_healthy_fixture(where, args, tmp_path):
    r = run_cli(*_local(args, tmp_path))
    assert r.exit_code == 0, (
        f"{where}: ibdiag {' '.join(args)} -> {r.exit_code}\n{r.stdout}{r.stderr}"
    )


def test_the_old_nhc_line_fails_the_healthy_fixture_and_why():
    """What NHC did with the line before: the storage ports at 200 Gb/s against --expect-rate 400."""
    r = run_cli(
        "topo",
        "--expect-adapters",
        "8",
        "--expect-rate",
        "400",
        "--root",
        str(HEALTHY),
        "-o",
        "line",
    )
    assert r.exit_code == 1 and r.stdout.startswith("FAIL port.rate mlx5_4:1, port.rate mlx5_5:1")
