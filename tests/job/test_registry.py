"""Every ``job.*`` id is registered in ibdiag.job.checks.CHECKS and documented in docs/job.md (the
project-wide check, tests/findings/test_registry.py, sees the registry once the CLI gathers it)."""

from __future__ import annotations

import ast
import re

from ibdiag.job.command import CHECKS  # with every module that registers a job.* check
from tests.support.env import REPO

ID_RE = re.compile(r"job\.[a-z][a-z0-9_]*")


def test_every_job_id_in_the_code_is_registered():
    found = set()
    for path in sorted((REPO / "ibdiag" / "job").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and ID_RE.fullmatch(node.value)
            ):
                found.add(node.value)
    assert found and found <= set(CHECKS.ids()), found - set(CHECKS.ids())


def test_every_registered_id_is_documented():
    text = (REPO / "docs" / "job.md").read_text()
    missing = [i for i in CHECKS.ids() if f"`{i}`" not in text]
    assert not missing, missing
    for check in CHECKS:
        assert check.summary and not check.summary.endswith(".")
