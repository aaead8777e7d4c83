"""Link resolution in a snapshot archive costs bounded work (issue 28, case 4): links nested
``L_i -> L_{i-1}/../L_{i-1}/../L_{i-1}/../d`` n deep, plus m links to the last, took 3^n steps per
link — a 6,577-byte archive with n=13, m=1000 projected hours of CPU. Each link is resolved once
(memoised, with the count of links the kernel would follow through it, so the kernel's 40 is kept),
and the total work of a pass is bounded: that archive is refused at once by a real
``ibdiag topo --root X.tar.gz`` process (3^13 links, more than the kernel itself would follow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ibdiag.errors import InputError
from ibdiag.node import archive
from ibdiag.node.snapshot import extracted
from tests.adversarial.test_archives import build, private_tmpdir  # noqa: F401 - a fixture


def nested_links(n: int, m: int) -> list[tuple]:
    entries: list[tuple] = [("sys/d", "dir"), ("sys/L0", "link", "d")]
    for i in range(1, n + 1):
        prev = f"L{i - 1}"
        entries.append((f"sys/L{i}", "link", f"{prev}/../{prev}/../{prev}/../d"))
    entries += [(f"sys/M{j}", "link", f"L{n}") for j in range(m)]
    return entries


@pytest.mark.slow
def test_nested_links_of_the_issue_resolve_in_a_real_process_quickly(tmp_path):
    arc = build(tmp_path / "nested.tar.gz", nested_links(13, 1000))
    assert arc.stat().st_size < 20_000
    # 3^13 x 1000 steps is hours; memoised it is about 1000 + 13 x 3 steps: seconds are plenty.
    r = subprocess.run(
        [sys.executable, "-m", "ibdiag", "topo", "--root", str(arc), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2, r.stderr
    assert "goes through more than 40 links" in r.stderr and "Traceback" not in r.stderr


def test_the_total_work_of_a_pass_is_bounded(tmp_path, private_tmpdir, monkeypatch):  # noqa: F811
    """Even memoised, a pass over many long links stops at its budget, refused with its reason."""
    monkeypatch.setattr(archive, "MAX_LINK_STEPS", 500)
    entries = [("sys/d", "dir")] + [(f"sys/l{j}", "link", "./" * 50 + "d") for j in range(20)]
    arc = build(tmp_path / "many.tar.gz", entries)
    with pytest.raises(InputError, match="more than 500 steps"):
        with extracted(arc):
            pytest.fail("a refused archive was extracted")


def test_a_loop_is_still_refused_and_a_shared_target_still_resolves(tmp_path, private_tmpdir):  # noqa: F811
    loop = build(tmp_path / "loop.tar.gz", [("sys/a", "link", "b"), ("sys/b", "link", "a")])
    with pytest.raises(InputError, match="more than 40 links"):
        with extracted(loop):
            pass
    ok = build(tmp_path / "ok.tar.gz", nested_links(2, 3) + [("sys/d/f", "file", "x")])
    with extracted(ok) as root:
        assert (root / "sys" / "M2" / "f").read_text() == "x"
