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
    """An ibdiag module imports another inside a function only with a ``# lazy: <reason>`` comment on
    that line or the one above it; cli/ included (issue 34: its command modules import their packages
    at module level, and cli/app.py loads the command modules themselves with importlib)."""
    offenders = [
        f"{p.relative_to(REPO)}:{line} imports {mod}"
        for p in _modules()
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


MAX_COMMAND_BODY_LINES = 60


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body after its signature and docstring."""
    body = fn.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def test_every_typer_command_body_is_at_most_60_lines():
    """Issue 34: cli/ declares options, builds the request, calls the command's entry point and emits;
    the command's logic lives in its package (``ibdiag.<command>.command.run``)."""
    long = []
    for p in sorted((PACKAGE / "cli").glob("*.py")):
        for fn in ast.walk(ast.parse(p.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and _typer_command(fn):
                if (n := _body_lines(fn)) > MAX_COMMAND_BODY_LINES:
                    long.append(f"{p.relative_to(REPO)}:{fn.lineno} {fn.name}: {n} lines")
    assert not long, "\n".join(long)


def test_a_long_command_body_is_found(tmp_path):
    src = '@app.command("x")\ndef x(a: int = 1) -> int:\n    """Doc."""\n' + "    a += 1\n" * 61
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef))
    assert _typer_command(fn) and _body_lines(fn) == 61


def _imports_of(path: Path) -> set[str]:
    """The ibdiag modules ``path`` imports, at any level (``from ibdiag.x import y`` counts ``ibdiag.x``
    and, when ``ibdiag.x.y`` is a module, that one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("ibdiag"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ibdiag"))
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles() -> list[list[str]]:
    import networkx as nx

    modules = {_module_name(p): p for p in _modules()}
    graph = nx.DiGraph()
    for name, path in modules.items():
        for target in _imports_of(path):
            if target in modules and target != name and not name.startswith(target + "."):
                graph.add_edge(name, target)
    return [sorted(c) for c in nx.simple_cycles(graph)]


def test_no_import_cycles():
    """Issue 34: a module never reaches itself through its imports (a package's ``__init__`` importing
    its own submodules is not a cycle: ``ibdiag.x.y`` importing ``ibdiag.x`` is left out)."""
    assert import_cycles() == []


#: The packages CONTRIBUTING's layout picture names in its arrows (the base modules, findings and output
#: are "below" everything that names them).
PICTURED = {"report", "job", "verdict", "sweep", "bench", "fabric", "history", "topo", "counters"}
PICTURED |= {"ports", "node", "runtime"}


def _picture() -> dict[str, set[str]]:
    """Package -> the packages its arrow in CONTRIBUTING.md's layout picture names."""
    import re

    text = (REPO / "CONTRIBUTING.md").read_text()
    block = text.split("```\nibdiag/\n", 1)[1].split("```", 1)[0]
    arrows: dict[str, set[str]] = {}
    package = None
    for line in block.splitlines():
        m = re.match(r"^  ([a-z_]+)/ ", line)
        if m:
            package = m.group(1)
        arrow = re.search(r"\s{2,}-> ([a-z, ]+)$", line)  # "parsers -> one model" is prose
        if package and arrow and package not in arrows:
            names = {n.strip() for n in arrow.group(1).split(",")}
            arrows[package] = names & PICTURED
    return arrows


def _imported_packages(package: str) -> set[str]:
    found: set[str] = set()
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for module in _imports_of(path):
            top = module.split(".")[1] if module.count(".") >= 1 else ""
            if top in PICTURED and top != package:
                found.add(top)
    return found


def test_contributings_layout_picture_names_what_each_package_imports():
    """Issue 34: the picture said `report -> bench` where the code had `report -> fabric`. Each arrow
    names exactly the command and middle packages its package imports."""
    picture = _picture()
    assert {"report", "job", "verdict", "fabric", "history", "topo", "counters"} <= set(picture)
    wrong = {
        package: {"pictured": sorted(named), "imported": sorted(_imported_packages(package))}
        for package, named in picture.items()
        if package in PICTURED and named != _imported_packages(package)
    }
    assert not wrong, wrong
