"""Findings, the report every command returns, and the renderers that turn it into output."""

from ibdiag.findings.model import Finding, Report, Severity, worst

__all__ = ["Finding", "Report", "Severity", "worst"]
