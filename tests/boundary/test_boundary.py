"""The one boundary (#13 step 8): ``main(argv, env) -> ExitStatus`` with an injected environment.

A test hands in its own streams, a fake terminal and an environment, so the live ``--watch`` table and
the progress lines run in-process; nothing below ``main`` reads ``sys.*`` or ``os.environ``.
"""

from __future__ import annotations

import ast
import io
import re

from ibdiag.errors import ExitStatus
from tests.support.cli import run_cli
from tests.support.env import REPO, SYSFS_FIXTURES

DGX = SYSFS_FIXTURES / "dgx-h100"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_main_returns_an_exit_status_and_writes_only_to_the_given_streams(capsys):
    from ibdiag.cli.env import Environment
    from ibdiag.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdin=io.StringIO(), stdout=out, stderr=err, environ={})
    status = main(["topo", "--root", str(DGX), "-o", "json"], env)
    assert status is ExitStatus.OK
    assert '"schema": "ibdiag.topo/1"' in out.getvalue() and err.getvalue() == ""
    status = main(["topo", "--root", str(DGX), "--bogus"], env)
    assert status is ExitStatus.USAGE and "ibdiag: error:" in err.getvalue()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # the process's own streams were never written


def test_watch_runs_in_process_on_a_fake_terminal():
    res = run_cli(
        "counters",
        "--root",
        DGX,
        "--watch",
        "--interval",
        "0.1",
        "--count",
        "2",
        stdout_tty=True,
        columns=160,
    )
    assert res.exit_code == 0, res.stderr
    screen = ANSI.sub("", res.stdout)
    assert "sample 1" in screen and "sample 2" in screen  # redrawn in place, once per sample
    assert "mlx5_0" in screen and "status: OK" in screen
    assert "\x1b[?25l" in res.stdout  # Live hid the cursor on the terminal ...
    assert "\x1b[?25h" in res.stdout  # ... and showed it again at the end


def test_watch_refuses_a_pipe_from_the_injected_environment():
    res = run_cli("counters", "--root", DGX, "--watch", "--count", "1", stdout_tty=False)
    assert res.exit_code == 2 and "--watch needs a terminal" in res.stderr


def test_progress_lines_only_on_a_terminal_stderr():
    res = run_cli(
        "counters",
        "--root",
        DGX,
        "--interval",
        "0.1",
        "--count",
        "2",
        "-o",
        "json",
        stderr_tty=True,
    )
    assert res.exit_code == 0, res.stderr
    assert "ibdiag: baseline read of 12 port(s); 2 sample(s) every 0.1 s" in res.stderr
    assert "sample 2/2 taken" in res.stderr and res.stdout.lstrip().startswith("{")
    quiet = run_cli("counters", "--root", DGX, "--interval", "0.1", "--count", "2", "-o", "json")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_environment_variables_come_from_the_injected_environment(tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_text("[topo\n")
    monkeypatch.delenv("IBDIAG_CONFIG", raising=False)
    res = run_cli("topo", "--root", DGX, env={"IBDIAG_CONFIG": str(bad)})
    assert res.exit_code == 2 and "not valid TOML" in res.stderr
    res = run_cli("topo", "--root", DGX, "-o", "json", env={"IBDIAG_DEBUG": "1"})
    assert res.exit_code == 0


def test_width_comes_from_the_injected_terminal():
    narrow = run_cli("counters", "--root", DGX, columns=80)
    wide = run_cli("counters", "--root", DGX, columns=200)
    assert max(map(len, narrow.stdout.splitlines())) <= 80
    assert max(map(len, wide.stdout.splitlines())) > 80


BOUNDARY = {
    "main.py",
    "env.py",
    "completions.py",
}  # completions.py is the `make completions` tool, not a command
FORBIDDEN = {
    ("sys", "stdout"),
    ("sys", "stderr"),
    ("sys", "stdin"),
    ("sys", "exit"),
    ("sys", "argv"),
    ("os", "environ"),
    ("os", "getenv"),
}


def test_no_command_module_touches_the_process():
    offenders = []
    for path in sorted((REPO / "ibdiag" / "cli").glob("*.py")):
        if path.name in BOUNDARY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in FORBIDDEN
            ):
                offenders.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "isatty":
                offenders.append(f"{path.name}:{node.lineno} .isatty")
    assert offenders == []


def test_one_error_writer():
    texts = {p.name: p.read_text() for p in (REPO / "ibdiag").rglob("*.py")}
    writers = sorted(
        name for name, text in texts.items() if re.search(r"f\"ibdiag: error: \{", text)
    )
    assert writers == ["errors.py"]
