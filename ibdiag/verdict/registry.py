"""The verdict's check registry, below every module that registers a check in it: the judgements of
a verdict (:mod:`~ibdiag.verdict.checks`), the node's rails (:mod:`~ibdiag.verdict.health`) and the
job on the fabric (:mod:`~ibdiag.verdict.placement`). The verdict (:mod:`~ibdiag.verdict.judge`) holds
the node's health, so the registry cannot live with the checks that read the verdict."""

from __future__ import annotations

from ibdiag.findings.registry import CheckRegistry

CHECKS = CheckRegistry("verdict")
