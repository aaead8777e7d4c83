"""JUnit XML of findings: one test case per finding, so CI systems show which check failed.

FAIL is a ``<failure>``; WARN passes with the message in ``<system-out>``, and is a ``<failure>``
under ``--strict``. A report without findings is one passing case named after the command.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ibdiag.report.model import Report, RunMeta, Severity


def _describe(f) -> str:
    parts = [f.message]
    if f.value is not None:
        parts.append(f"value: {f.value}{' ' + f.unit if f.unit else ''}")
    if f.limit is not None:
        parts.append(f"limit: {f.limit}{' ' + f.unit if f.unit else ''}")
    if f.hint:
        parts.append(f"hint: {f.hint}")
    return "\n".join(parts)


def render_junit(report: Report, meta: RunMeta, *, strict: bool = False) -> str:
    findings = report.findings
    failing = set(id(f) for f in report.failing(strict))
    suites = ET.Element("testsuites", name="ibdiag")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"ibdiag.{report.command}",
        hostname=meta.host,
        timestamp=meta.generated_at,
        tests=str(max(len(findings), 1)),
        failures=str(len(failing)),
        errors="0",
        skipped="0",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="ibdiag.version", value=meta.version)
    ET.SubElement(props, "property", name="ibdiag.schema", value=report.schema)
    if not findings:
        ET.SubElement(suite, "testcase", classname=f"ibdiag.{report.command}", name=report.command, time="0")
    for f in findings:
        case = ET.SubElement(suite, "testcase", classname=f.check, name=f.subject or f.check, time="0")
        if id(f) in failing:
            fail = ET.SubElement(case, "failure", message=f.message, type=f.severity.value)
            fail.text = _describe(f)
        elif f.severity is Severity.WARN:
            out = ET.SubElement(case, "system-out")
            out.text = "WARN: " + _describe(f)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
