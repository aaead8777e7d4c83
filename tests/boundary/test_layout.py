"""The house rules CONTRIBUTING.md states, checked on the source: imports at module level, small
modules, small functions."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.env import REPO

PACKAGE = REPO / "ibdiag"
LAZY_MARK = "# lazy:"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _function_level_ibdiag_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import of an ibdiag module inside a function that does not say why."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if not any(n == "ibdiag" or n.startswith("ibdiag.") for n in names):
                continue
            said = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
            if LAZY_MARK not in said:
                found.append((node.lineno, names[0]))
    return found


def test_ibdiag_modules_import_each_other_at_module_level():
    """Below cli/ (which loads each command lazily), an ibdiag module imports another inside a
    function only with a ``# lazy: <reason>`` comment on that line or the one above it."""
    offenders = [
        f"{p.relative_to(REPO)}:{line} imports {mod}"
        for p in _modules()
        if "cli" not in p.relative_to(PACKAGE).parts
        for line, mod in _function_level_ibdiag_imports(p)
    ]
    assert not offenders, "\n".join(offenders)


def test_a_function_level_import_without_a_reason_is_found(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(
        "def f():\n    from ibdiag.units import parse_size\n"
        "def g():\n    # lazy: start-up time\n    from ibdiag.units import parse_size\n"
        "def h():\n    import json\n"
    )
    assert _function_level_ibdiag_imports(p) == [(2, "ibdiag.units")]


def _typer_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A typer command: its length is its option signature (``@app.command``)."""
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "command"
        for d in fn.decorator_list
    )


def test_no_module_over_500_lines():
    long = [
        f"{p.relative_to(REPO)}: {n} lines"
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "\n".join(long)


def test_no_function_over_80_lines_but_typer_commands():
    long = []
    for p in _modules():
        for fn in ast.walk(ast.parse(p.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and not _typer_command(fn):
                n = (fn.end_lineno or fn.lineno) - fn.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(REPO)}:{fn.lineno} {fn.name}: {n} lines")
    assert not long, "\n".join(long)
