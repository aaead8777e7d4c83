"""The alert rules docs/operations.md suggests (contrib/prometheus/ibdiag-alerts.yml, issue #27),
checked by Debian's real ``promtool``: ``check rules`` (valid), ``test rules`` (each alert fires on the
series ibdiag writes, when it should: a failing check once per port, a judge that cannot run, a textfile
that stopped being written, a node that never wrote one), and the docs show the file as it is."""

from __future__ import annotations

import re
import subprocess

from tests.support.env import REPO, need_tool

RULES = REPO / "contrib" / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [need_tool("promtool"), *args], cwd=RULES, capture_output=True, text=True, timeout=120
    )


def test_promtool_checks_the_rules():
    res = _promtool("check", "rules", "ibdiag-alerts.yml")
    assert res.returncode == 0 and "SUCCESS: 4 rules found" in res.stdout, res.stdout + res.stderr


def test_promtool_unit_tests_each_alert():
    res = _promtool("test", "rules", "ibdiag-alerts.test.yml")
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


def test_a_broken_rule_would_fail(tmp_path):
    """The check can fail: a rule whose expression does not parse is refused."""
    bad = tmp_path / "bad.yml"
    bad.write_text((RULES / "ibdiag-alerts.yml").read_text().replace("== 2", "== == 2"))
    res = _promtool("check", "rules", str(bad))
    assert res.returncode != 0


def test_the_docs_show_the_rules_file():
    text = (REPO / "docs" / "operations.md").read_text()
    blocks = re.findall(r"```yaml\n(groups:.*?)```", text, re.S)
    rules = (RULES / "ibdiag-alerts.yml").read_text()
    assert blocks and blocks[0] == rules[rules.index("groups:") :]
