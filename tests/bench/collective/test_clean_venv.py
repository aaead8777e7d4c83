"""A clean virtual environment with only ``pip install '.[collective]'`` runs a 2-rank gloo ``bench collective``.

The test extras pull matplotlib, and the core pandas, which pull numpy: in the project's own venv a
dependency the ``collective`` extra forgot (torch's object collectives need numpy) would go unnoticed. This builds a
venv from nothing (torch 2.13.0 from the local wheel pip finds; ``pip install torch==2.13.0`` first, so
the 190 MB wheel is not built into a cache twice), installs the project with the ``collective`` extra
only, and runs the benchmark with the venv's own console script. Slow (about a minute on a quiet machine);
``make test`` and ``.ci/run`` run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.env import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


def test_only_the_collective_extra_runs_a_two_rank_gloo_benchmark(tmp_path):
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    torch = _run([*pip, "torch==2.13.0"], timeout=600)
    assert torch.returncode == 0, torch.stderr[-2000:]
    # a copy of the tree (no .venv, no build outputs): pip builds the wheel from pyproject.toml as a user would
    src = tmp_path / "src"
    copied = _run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    )
    assert copied.returncode == 0, copied.stderr
    for rel in filter(None, copied.stdout.split("\0")):
        p = REPO / rel
        if p.is_file() and (
            rel.startswith("ibdiag/") or rel in ("pyproject.toml", "README.md", "LICENSE")
        ):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes(p.read_bytes())
    installed = _run([*pip, f"{src}[collective]"], timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    freeze = _run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"]
    ).stdout.lower()
    # only what the core and the extra pull: pandas is core (ibdiag report, issue 27) and brings numpy,
    # so the extra's own numpy (torch's object collectives need it) is checked in pyproject itself
    assert "matplotlib" not in freeze and "pytest" not in freeze
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.replace(" ", "").startswith("numpy") for d in extra["collective"])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "IBDIAG_", "PYTHON", "VIRTUAL_ENV"))
    }
    res = _run(
        [
            str(venv / "bin" / "ibdiag"),
            "bench",
            "collective",
            "--nproc",
            "2",
            "--backend",
            "gloo",
            "--sizes",
            "4K,64K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "-o",
            "json",
        ],
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (
        doc["backend"] == "gloo"
        and doc["world_size"] == 2
        and all(r["wrong"] == 0 for r in doc["results"])
    )
