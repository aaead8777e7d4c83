"""Every check id ibdiag can emit is registered in a package's CHECKS and documented in README.md or docs/."""

from __future__ import annotations

import ast
import json
import re

import pytest

from ibdiag.cli.registries import all_checks, all_registries
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from tests.support.env import REPO, SYSFS_FIXTURES

ID_RE = re.compile(
    r"(topo|port|counters|history|kernel|fabric|verdict|bench|collective|import|sweep|report|job)\.[a-z][a-z0-9_]*"
)
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _code_ids() -> dict[str, str]:
    """Check-id-shaped string literals in ibdiag/ -> the file that has one."""
    out: dict[str, str] = {}
    for path in sorted((REPO / "ibdiag").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and ID_RE.fullmatch(node.value)
            ):
                out.setdefault(node.value, str(path.relative_to(REPO)))
    return out


def test_registries_are_consistent():
    checks = all_checks()
    assert all(len(registry) for registry in all_registries())
    for check in checks.values():
        assert ID_RE.fullmatch(check.id), check.id
        assert check.summary and not check.summary.endswith("."), check.id


def test_check_ids_are_literals():
    """An id built at run time (f"{prefix}.port_state") cannot be checked here: ids are written out."""
    built = []
    for path in sorted((REPO / "ibdiag").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "Finding"
                and node.args
                and isinstance(node.args[0], ast.JoinedStr)
            ):
                built.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not built, built


def test_every_id_in_the_code_is_registered():
    registered = all_checks()
    missing = {i: where for i, where in _code_ids().items() if i not in registered}
    assert not missing, f"check ids used in the code but not in any CHECKS registry: {missing}"


def test_every_registered_id_is_documented():
    text = "\n".join(p.read_text() for p in DOCS)
    undocumented = [i for i in all_checks() if f"`{i}`" not in text]
    assert not undocumented, (
        f"check ids not documented (as `id`) in README.md or docs/: {undocumented}"
    )


@pytest.mark.parametrize(
    "fixture", sorted(p.name for p in SYSFS_FIXTURES.iterdir() if (p / "sys").is_dir())
)
def test_every_id_emitted_on_the_fixtures_is_registered(cli, fixture):
    root = SYSFS_FIXTURES / fixture
    registered = all_checks()
    runs = [
        ["topo", "--root", root, "-o", "json"],
        ["counters", "--root", root, "-o", "json"],
        [
            "verdict",
            "--params",
            "8e9",
            "--dtype",
            "bf16",
            "--ranks",
            "512",
            "--compute-s",
            "2",
            "--busbw",
            "40",
            "--link-gbps",
            "400",
            "--root",
            root,
            "-o",
            "json",
        ],
    ]
    emitted: set[str] = set()
    for args in runs:
        res = cli(*args)
        if res.exit_code == 3:  # counters on a node without RDMA ports: nothing to judge
            continue
        doc = json.loads(res.stdout)
        emitted |= {f["check"] for f in doc["findings"]}
        emitted |= {
            f["check"]
            for part in ("failing", "warnings")
            for f in (doc.get("fabric_health") or {}).get(part, [])
        }
    assert emitted and not emitted - set(registered), emitted - set(registered)


def test_a_check_function_returns_findings_of_its_own_id_only():
    reg = CheckRegistry("demo")

    @reg.check("demo.one", "one thing")
    def one(ok: bool) -> Finding | None:
        return Finding("demo.one" if ok else "demo.other", Severity.OK, "node", "fine")

    @reg.check("demo.none", "nothing to say")
    def nothing() -> None:
        return None

    assert [f.check for f in one(True)] == ["demo.one"]
    assert nothing() == []
    assert reg.ids() == ("demo.one", "demo.none") and reg.get("demo.one").function is one
    with pytest.raises(RuntimeError, match="returned a demo.other finding"):
        one(False)
    with pytest.raises(ValueError, match="registered twice"):
        reg.declare("demo.one", "again")
    with pytest.raises(ValueError, match="does not start with"):
        reg.declare("other.one", "wrong package")
