"""The README's install recipes, run as written in a clean directory (issue 38): on Debian 12 the system
Python is externally managed (PEP 668) and ``pip install .`` is refused; a venv with the console script
linked onto PATH, and pipx (pip-installed into a venv this test makes), work. What a health-check node
gets (topo, counters) is measured: no numpy, pandas or networkx; ``fabric`` then says which extra to
install, and the extra makes it work. The packages come from pip's configured index (PyPI, or a mirror
set in pip.conf); the installs take a minute or two each."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import FIXTURES, REPO, SYSFS_FIXTURES, unavailable

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
HEALTHY = SYSFS_FIXTURES / "dgx-h100"
FABRIC = FIXTURES / "fabric" / "rail-fat-tree-faulty"
HEAVY = ("numpy", "pandas", "networkx")
#: What a node's venv (the core, pip and setuptools included) may weigh: measured 52 MB (issue 38).
NODE_BUDGET_MB = 80


def _python() -> str:
    """The README's `python3`: Debian's own where it is (the one PEP 668 guards), else this one."""
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def _source(tmp_path: Path) -> Path:
    """A copy of this checkout, as a clone would be (pip builds in the tree: keep ours clean)."""
    src = tmp_path / "ibdiag-src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "*.egg-info",
            "__pycache__",
            "fixtures",
            ".*_cache",
            ".hypothesis",
        ),
    )
    return src


def _run(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: int = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def _pip_install(pip: list[str], *args: str) -> None:
    res = _run([*pip, "install", "-q", *args])
    if res.returncode != 0 and re.search(
        r"(?i)connection|resolve|no matching distribution", res.stderr
    ):
        unavailable(f"no package index reachable for pip: {res.stderr.strip()[-300:]}")
    assert res.returncode == 0, res.stderr[-3000:]


def _size_mb(path: Path) -> float:
    return (
        sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6
    )


def _bare_env(bin_dir: Path) -> dict[str, str]:
    """What slurmd/cron give a job, with the recipe's PATH directory: no PYTHONPATH, no venv."""
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(bin_dir.parent), "LANG": "C.UTF-8"}


def test_debians_system_pip_refuses_the_old_recipe(tmp_path):
    marker = list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED"))
    if not marker or _run(["/usr/bin/python3", "-m", "pip", "--version"]).returncode != 0:
        unavailable("not a Debian 12-like system Python with pip (python3-pip)")
    res = _run(
        [
            "/usr/bin/python3",
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            str(_source(tmp_path)),
        ]
    )
    assert res.returncode != 0 and "externally-managed-environment" in res.stderr
    # the README no longer tells anyone to do that, and says why
    assert "PEP 668" in README and "\npip install .\n" not in README


def test_the_venv_recipe_gives_a_node_its_checks_without_the_heavy_libraries(tmp_path):
    assert (
        "python3 -m venv /opt/ibdiag/venv" in README
        and "ln -s /opt/ibdiag/venv/bin/ibdiag" in README
    )
    venv, bin_dir = tmp_path / "opt-ibdiag" / "venv", tmp_path / "usr-local-bin"
    bin_dir.mkdir()
    res = _run([_python(), "-m", "venv", str(venv)])
    assert res.returncode == 0, res.stderr  # Debian: needs python3-venv (the README says so)
    src = _source(tmp_path)
    _pip_install([str(venv / "bin" / "python"), "-m", "pip"], str(src))
    (bin_dir / "ibdiag").symlink_to(venv / "bin" / "ibdiag")
    site = next(venv.glob("lib/python3*/site-packages"))
    assert [m for m in HEAVY if (site / m).exists()] == []
    size = _size_mb(venv)
    assert size < NODE_BUDGET_MB, f"a node's venv weighs {size:.0f} MB"
    env = _bare_env(bin_dir)
    topo = _run(["ibdiag", "topo", "--root", str(HEALTHY), "-o", "line"], env=env)
    assert topo.returncode == 0 and topo.stdout.startswith("OK ibdiag topo"), topo.stderr
    counters = _run(["ibdiag", "counters", "--root", str(HEALTHY), "-o", "line"], env=env)
    assert counters.returncode == 0, counters.stderr
    # what a node does not have is said, with the extra that brings it (exit 3: could not run)
    fabric = _run(["ibdiag", "fabric", "--from", str(FABRIC)], env=env)
    assert fabric.returncode == 3 and "pip install 'ibdiag[fabric]'" in fabric.stderr, fabric.stderr
    assert "Traceback" not in fabric.stderr
    # the management host's extra: fabric works
    _pip_install([str(venv / "bin" / "python"), "-m", "pip"], f"{src}[fabric]")
    fabric = _run(["ibdiag", "fabric", "--from", str(FABRIC), "-o", "line"], env=env)
    assert fabric.returncode == 1 and fabric.stdout.startswith("FAIL fabric.link_rate"), (
        fabric.stderr
    )


def test_the_pipx_recipe_from_a_pip_installed_pipx(tmp_path):
    assert "pipx install" in README
    tools = tmp_path / "tools"
    assert _run([_python(), "-m", "venv", str(tools)]).returncode == 0
    _pip_install([str(tools / "bin" / "python"), "-m", "pip"], "pipx")
    home, bin_dir = tmp_path / "pipx-home", tmp_path / "root-local-bin"
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("PATH", "HOME")},
        "PIPX_HOME": str(home),
        "PIPX_BIN_DIR": str(bin_dir),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
    }
    res = _run([str(tools / "bin" / "pipx"), "install", str(_source(tmp_path))], env=env)
    if res.returncode != 0 and re.search(
        r"(?i)connection|resolve|no matching distribution", res.stderr
    ):
        unavailable(f"no package index reachable for pipx: {res.stderr.strip()[-300:]}")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert (bin_dir / "ibdiag").exists()
    topo = _run(["ibdiag", "topo", "--root", str(HEALTHY), "-o", "line"], env=_bare_env(bin_dir))
    assert topo.returncode == 0 and topo.stdout.startswith("OK ibdiag topo"), topo.stderr
    site = next(home.glob("venvs/ibdiag/lib/python3*/site-packages"))
    assert [m for m in HEAVY if (site / m).exists()] == []
