"""JUnit XML of findings: one test case per finding, so CI systems show which check failed.

FAIL is a ``<failure>``; WARN is a ``<skipped>`` case with the message (CI tools show skipped
messages; GitLab drops ``system-out`` of passing cases), and a ``<failure>`` under ``--strict``. The
host is in the suite name (``ibdiag.topo@node17``, and ``hostname``), so reports from many nodes
stay apart in one Jenkins view; class names stay the check ids. A report without findings is one passing case named after the command; a run
that could not judge (exit 2/3) is one ``<error>`` case (:func:`render_junit_error`).
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ibdiag.findings.model import Finding, Report, RunMeta, Severity


def _describe(f: Finding) -> str:
    parts = [f.message]
    if f.value is not None:
        parts.append(f"value: {f.value}{' ' + f.unit if f.unit else ''}")
    if f.limit is not None:
        parts.append(f"limit: {f.limit}{' ' + f.unit if f.unit else ''}")
    if f.hint:
        parts.append(f"hint: {f.hint}")
    return "\n".join(parts)


def _suite(
    command: str,
    meta: RunMeta,
    *,
    tests: int,
    failures: int,
    errors: int,
    skipped: int,
    time_s: float,
) -> tuple[ET.Element, ET.Element]:
    suites = ET.Element(
        "testsuites",
        name="ibdiag",
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
        time=f"{time_s:.3f}",
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"ibdiag.{command}@{meta.host}",
        hostname=meta.host,
        timestamp=meta.generated_at,
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=f"{time_s:.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="ibdiag.version", value=meta.version)
    ET.SubElement(props, "property", name="ibdiag.host", value=meta.host)
    return suites, suite


def _text(suites: ET.Element) -> str:
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def render_junit(
    report: Report, meta: RunMeta, *, strict: bool = False, time_s: float = 0.0
) -> str:
    """``time_s``: how long the run took (the suite's time; a finding has no duration of its own: 0)."""
    findings = report.findings
    failing = set(id(f) for f in report.failing(strict))
    warned = [f for f in findings if f.severity is Severity.WARN and id(f) not in failing]
    suites, suite = _suite(
        report.command,
        meta,
        tests=max(len(findings), 1),
        failures=len(failing),
        errors=0,
        skipped=len(warned),
        time_s=time_s,
    )
    ET.SubElement(suite[0], "property", name="ibdiag.schema", value=report.schema)
    share = "0"
    if not findings:
        ET.SubElement(
            suite, "testcase", classname=f"ibdiag.{report.command}", name=report.command, time=share
        )
    for f in findings:
        case = ET.SubElement(
            suite, "testcase", classname=f.check, name=f.subject or f.check, time=share
        )
        if id(f) in failing:
            fail = ET.SubElement(case, "failure", message=f.message, type=f.severity.value)
            fail.text = _describe(f)
        elif f.severity is Severity.WARN:
            skip = ET.SubElement(case, "skipped", message=f"WARN: {f.message}", type="warn")
            skip.text = "WARN: " + _describe(f)
            out = ET.SubElement(case, "system-out")
            out.text = "WARN: " + _describe(f)
    return _text(suites)


def render_junit_error(
    command: str, meta: RunMeta, message: str, hint: str | None, *, status: int, time_s: float = 0.0
) -> str:
    """The report of a run that could not judge (exit 2 or 3): one ``<error>`` case saying why."""
    suites, suite = _suite(command, meta, tests=1, failures=0, errors=1, skipped=0, time_s=time_s)
    case = ET.SubElement(
        suite, "testcase", classname=f"ibdiag.{command}", name=command, time=f"{time_s:.3f}"
    )
    err = ET.SubElement(case, "error", message=message, type=f"exit {status}")
    err.text = message + (f"\nhint: {hint}" if hint else "")
    return _text(suites)
