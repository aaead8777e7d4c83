"""Host side of the RDMA test bed (``make test-rdma``): boot the guest, run the guest tests, report them.

One guest (tests/rdmavm/guest/, rxe over a veth pair) runs the whole single-node selection with
pytest inside it; its JUnit XML comes back through the run directory (build/rdmavm/single/) and
each guest test file is one test here, failing with the guest's own failure text. A guest that
cannot boot, or a guest test that was skipped, fails under IBDIAG_TEST_STRICT=1 or $CI; elsewhere
(no root to install qemu, no kernel package) the tests skip with the reason.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.rdmavm import vm

HERE = Path(__file__).resolve().parent
RESULTS = vm.REPO / "build" / "rdmavm"
STRICT = os.environ.get("IBDIAG_TEST_STRICT", "") not in ("", "0") or bool(os.environ.get("CI"))
GUEST_FILES = sorted(p.name for p in (HERE / "guest").glob("test_*.py"))
#: The whole single-node selection, boot included (seconds). About 4-5 minutes on an idle 2-core
#: machine; emulation slows down with every other busy process, so leave room.
SINGLE_TIMEOUT_S = 720

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    outcome: str  # passed | failed | error | skipped
    text: str


def parse_junit(path: Path) -> list[Case]:
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        classname = tc.get("classname", "")
        file = classname.split(".")[-1] + ".py" if classname else "?"
        outcome, text = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                text = (el.get("message") or "") + "\n" + (el.text or "")
                break
        cases.append(Case(file, tc.get("name", "?"), outcome, text))
    return cases


def _unavailable(reason: str) -> None:
    if STRICT:
        pytest.fail(f"the RDMA test bed must run here (IBDIAG_TEST_STRICT/CI) but {reason}")
    pytest.skip(reason)


def guest_pytest(selection: str, junit: str) -> str:
    return f"{sys.executable} -m pytest -v -p no:cacheprovider -o timeout=240 -rfEs --durations=10 {selection} --junitxml={junit}"


def progress(log: str) -> str:
    """What the guest's pytest -v got through, from its log: when the guest was killed, the test
    that was running is the one after the last outcome."""
    done = [line.split(" ")[0] for line in log.splitlines() if line.startswith("tests/") and (" PASSED" in line or " FAILED" in line or " ERROR" in line or " SKIPPED" in line)]
    started = [line.split(" ")[0] for line in log.splitlines() if line.startswith("tests/") and "::" in line]
    running = [t for t in started if t not in done]
    return f"{len(done)} finished; running when it stopped: {running[-1] if running else 'none'}"


@pytest.fixture(scope="session")
def single_node() -> tuple[vm.GuestRun, list[Case]]:
    out = RESULTS / "single"
    try:
        run = vm.run(guest_pytest("tests/rdmavm/guest", "/mnt/out/junit.xml"), out, timeout_s=SINGLE_TIMEOUT_S)
    except vm.Unavailable as e:
        _unavailable(str(e))
    junit = out / "junit.xml"
    if not junit.is_file():
        pytest.fail(
            f"the guest produced no test results (exit {run.rc}; {progress(run.log)}); last lines:\n{run.tail()}\n"
            f"(guest log: {out / 'guest.log'}, console: {out / 'console.log'})"
        )
    return run, parse_junit(junit)


@pytest.mark.parametrize("name", GUEST_FILES)
def test_single_node_guest(single_node, name):
    run, cases = single_node
    mine = [c for c in cases if c.file == name]
    assert mine, f"no test of {name} ran in the guest (exit {run.rc}):\n{run.tail()}"
    bad = [c for c in mine if c.outcome != "passed"]
    assert not bad, "\n\n".join(f"{c.name}: {c.outcome}\n{c.text.strip()[-3000:]}" for c in bad)
