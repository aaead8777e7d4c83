"""Packaging (#11): what `pip install ibdiag[...]` promises, the oldest Python, and --help summaries."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def test_collective_extra_pulls_numpy_and_never_pins_torch():
    extra = PROJECT["optional-dependencies"]["collective"]
    torch = [d for d in extra if d.startswith("torch")]
    assert torch and all("==" not in d and ">=" in d for d in torch), (
        extra
    )  # a CUDA torch already there is kept
    assert any(re.match(r"numpy\b", d) for d in extra), extra  # torch's object collectives need it


def test_python_310_supported_with_a_tomli_fallback():
    assert PROJECT["requires-python"] == ">=3.10"
    assert "tomli>=2.0; python_version < '3.11'" in PROJECT["dependencies"]
    assert "Programming Language :: Python :: 3.10" in PROJECT["classifiers"]


def test_no_syntax_or_library_newer_than_python_310():
    """vermin reads every module and names the oldest Python that runs it (3.10 is Ubuntu 22.04's)."""
    vermin = Path(sys.executable).parent / "vermin"
    exe = str(vermin) if vermin.exists() else shutil.which("vermin")
    if exe is None:
        pytest.fail("vermin is not installed (it is in the test extras: make test-venv)")
    out = subprocess.run(
        [exe, "--no-tips", "--eval-annotations", str(REPO / "ibdiag")],
        capture_output=True,
        text=True,
        timeout=240,
    ).stdout
    found = re.search(r"Minimum required versions: ([0-9.]+)", out)
    assert found, out
    assert tuple(int(x) for x in found.group(1).split(".")) <= (3, 10), out


def test_a_node_install_leaves_the_heavy_libraries_to_extras(tmp_path):
    """Issue 38: numpy, pandas and networkx were 176 of the 226 MB every health-check node installed.
    They are extras now ([fabric], [report]); a command without its extra says which to install
    (errors.missing_extra, tests/boundary/test_install.py runs it). Issue #27's complaint — report
    exiting 3 for want of pandas after `pip install .` — is answered by that message, and the wheel's
    metadata carries the extras."""
    core = " ".join(PROJECT["dependencies"])
    assert not re.search(r"\b(pandas|networkx|numpy)\b", core), core
    extras = PROJECT["optional-dependencies"]
    assert any(d.startswith("networkx") for d in extras["fabric"])
    assert {d.split(">")[0] for d in extras["report"]} == {"pandas", "networkx"}
    build = tmp_path / "src"
    shutil.copytree(
        REPO,
        build,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "*.egg-info", "__pycache__", "fixtures"
        ),
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(build),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    import zipfile

    (wheel,) = tmp_path.glob("ibdiag-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [
        line for line in meta.splitlines() if re.match(r"Requires-Dist: (pandas|networkx)", line)
    ]
    assert requires and all("extra ==" in r for r in requires), requires
    assert 'extra == "fabric"' in meta and 'extra == "report"' in meta


def test_a_missing_extra_names_itself_for_each_way_of_installing():
    from ibdiag.errors import ExitStatus, missing_extra

    e = missing_extra("networkx", "ibdiag fabric")
    assert e.exit_status is ExitStatus.CANNOT_RUN
    assert e.message == "ibdiag fabric needs networkx, which this installation of ibdiag leaves out"
    assert "pip install 'ibdiag[fabric]'" in (e.hint or "") and "pipx inject ibdiag networkx" in (
        e.hint or ""
    )


def test_typer_pinned_to_the_tested_minor_series():
    import typer

    (dep,) = [d for d in PROJECT["dependencies"] if d.startswith("typer")]
    low, high = re.fullmatch(r"typer>=([0-9.]+),<([0-9.]+)", dep).groups()  # type: ignore[union-attr]
    version = tuple(int(x) for x in typer.__version__.split(".")[:2])
    assert (
        tuple(int(x) for x in low.split(".")[:2])
        <= version
        < tuple(int(x) for x in high.split(".")[:2])
    )


def test_license_urls_and_classifiers():
    assert PROJECT["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
    assert {"Homepage", "Source", "Issues"} <= set(PROJECT["urls"])
    assert any(c.startswith("Topic :: System :: Monitoring") for c in PROJECT["classifiers"])


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"]])
def test_help_summaries_are_not_cut_at_80_columns(cli, argv):
    from ibdiag.cli import SHORT_HELP

    res = cli(*argv, env={"COLUMNS": "80"})
    assert res.exit_code == 0
    commands = res.stdout.split("Commands:", 1)[1].split("\n\n", 1)[0].strip().splitlines()
    assert len(commands) >= 4
    for line in commands:
        name, summary = line.split(None, 1)
        assert summary == SHORT_HELP[name], (
            line
        )  # whole, not "...": every command has a short summary
        assert len(line) <= 78


@pytest.mark.parametrize(
    "argv", [["--help"], ["topo", "--root", "fixtures/sysfs/dgx-h100", "-o", "json"]]
)
def test_startup_imports_neither_pydantic_nor_rich(argv):
    """#15: typer's pydantic coercion and rich's tables were the largest share of start-up."""
    code = (
        "import sys\nfrom ibdiag.cli.main import main\n"
        f"main({argv!r})\n"
        "sys.stderr.write('LOADED=' + ','.join(m for m in ('pydantic', 'rich') if m in sys.modules) + '\\n')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert "LOADED=\n" in res.stderr, res.stderr[-500:]


def test_topo_on_a_directory_imports_neither_the_snapshot_writer_nor_socket():
    """#15: a directory --root needs only the manifest's reader; the host name comes from uname."""
    code = (
        "import sys\nfrom ibdiag.cli.main import main\n"
        "main(['topo', '--root', 'fixtures/sysfs/dgx-h100', '-o', 'json'])\n"
        "sys.stderr.write('LOADED=' + ','.join(m for m in ('socket', 'ibdiag.node.snapshot', 'ibdiag.node.archive', 'tarfile') if m in sys.modules) + '\\n')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert '"host": "dgx-h100-01"' in res.stdout  # the fixture's manifest is still read
    assert "LOADED=\n" in res.stderr, res.stderr[-500:]


def test_own_process_runs_the_command_with_the_collector_on_and_start_up_frozen():
    """#15: run() pauses the cyclic collector for start-up and freezes what start-up made as the
    command begins; the command itself (a long `bench serve` too) runs with the collector on."""
    code = (
        "import gc, sys\n"
        "import ibdiag.node.discover as d\n"
        "seen = []\n"
        "real = d.discover\n"
        "def spy(*a, **k):\n"
        "    seen.append((gc.isenabled(), gc.get_freeze_count() > 0))\n"
        "    return real(*a, **k)\n"
        "d.discover = spy\n"
        "import atexit\n"
        "atexit.register(lambda: sys.stderr.write(f'SEEN={seen}\\n'))\n"
        "sys.argv = ['ibdiag', 'topo', '--root', 'fixtures/sysfs/dgx-h100', '-o', 'json']\n"
        "from ibdiag.cli.main import run\n"
        "run()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert res.returncode == 0 and '"schema": "ibdiag.topo/1"' in res.stdout, res.stderr[-500:]
    assert "SEEN=[(True, True)]" in res.stderr, res.stderr[-500:]


def test_main_in_process_leaves_the_collector_alone():
    import gc

    from ibdiag.cli.main import main

    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    main(["topo", "--root", str(REPO / "fixtures/sysfs/dgx-h100"), "-o", "line"])
    main(["--help"])
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def _modules_after(argv: list[str], env: dict[str, str] | None = None) -> set[str]:
    code = (
        "import sys\nfrom ibdiag.cli.main import main\n"
        f"status = main({argv!r})\n"
        "sys.stderr.write('LOADED=' + ','.join(sorted(m for m in sys.modules if m.startswith('ibdiag.cli.'))) + '\\n')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO, env=env
    )
    line = [x for x in res.stderr.splitlines() if x.startswith("LOADED=")]
    assert line, res.stderr[-800:]
    return set(line[-1].removeprefix("LOADED=").split(","))


def test_command_modules_load_only_when_their_command_runs():
    """#15: `ibdiag topo` imports and converts topo's command alone; `--help` lists all from their summaries."""
    from ibdiag.cli import COMMANDS

    every = {m for group in COMMANDS.values() for m in group.values()}
    assert _modules_after(["--help"]) & every == set()
    assert _modules_after(["topo", "--root", "fixtures/sysfs/dgx-h100", "-o", "json"]) & every == {
        "ibdiag.cli.topo"
    }
    assert _modules_after(["bench", "p2p", "--help"]) & every == {"ibdiag.cli.bench_p2p"}


def test_every_lazy_command_is_registered_by_its_module(cli):
    """A wrong COMMANDS entry would only show when that command is used: use each one."""
    from ibdiag.cli import COMMANDS

    for group, names in COMMANDS.items():
        for name in names:
            argv = [name, "--help"] if group == "ibdiag" else [group, name, "--help"]
            res = cli(*argv)
            assert res.exit_code == 0, (argv, res.stderr)
            assert f"Usage: ibdiag {' '.join(argv[:-1])}" in res.stdout


def test_a_typo_is_answered_with_the_unloaded_command_names(cli):
    res = cli("bench", "colective")
    assert res.exit_code == 2
    assert "Did you mean 'collective'?" in res.stderr


def test_shell_completion_reaches_a_command_that_is_not_loaded_yet():
    env = {
        **__import__("os").environ,
        "_IBDIAG_COMPLETE": "complete_bash",
        "COMP_WORDS": "ibdiag bench p2p --tra",
        "COMP_CWORD": "3",
    }
    res = subprocess.run(
        [sys.executable, "-m", "ibdiag"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert "--transport" in res.stdout, (res.stdout, res.stderr[-500:])


def test_help_loads_the_boundary_alone():
    """`ibdiag --help` loads the app and the boundary (cli.app, env, errors, main), nothing a command
    needs: the error writer's envelope, junit and textfile modules are imported when they write."""
    code = (
        "import contextlib, io, sys\nfrom ibdiag.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])\n"
        "sys.stderr.write('LOADED=' + ','.join(sorted(m for m in sys.modules if m.startswith('ibdiag'))) + '\\n')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    loaded = set(res.stderr.split("LOADED=", 1)[1].split()[0].split(","))
    assert loaded <= {
        "ibdiag",
        "ibdiag.cli",
        "ibdiag.cli.app",
        "ibdiag.cli.env",
        "ibdiag.cli.errors",
        "ibdiag.cli.main",
        "ibdiag.errors",
    }, loaded
