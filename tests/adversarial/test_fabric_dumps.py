"""Saved fabrics read back (``fabric --from``, ``--since``, ``--expect DUMP``) as untrusted input (issue
42, items 2, 4, 8 and a member twice, part 2).

A dump had no budget as a whole: one 255 MiB stderr member in a 264 KB ``.tar.gz`` took 84 s and
2.4 GB, and 64 members were allowed (about 16 GiB). Now one dump may hold 512 MiB in all (256 MiB a
file), 8,000,000 lines a tool's output and 1,000,000 lines of a tool's stderr (each line cut at 1024
characters before a pattern sees it): past any of them it is refused, exit 2, naming the file. The big
cases run as real processes under RLIMIT_CPU and RLIMIT_AS, so a regression fails in seconds, not
minutes, and never takes the machine's memory. ``capture.json`` is read by the bounded JSON reader
(``"[" * 100000`` was a RecursionError, exit 3); an archive that holds a file twice is refused (the
later copy won silently); the files of a dump directory go through the checked reader (a FIFO among
them was opened)."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ibdiag
from ibdiag.errors import InputError
from tests.adversarial.test_report_devices import _blocked_writer
from tests.support.cli import run_cli
from tests.support.env import FIXTURES
from tests.support.peak import PEAK_FILE_ENV, REPORTER

FAULTY = FIXTURES / "fabric" / "rail-fat-tree-faulty"
#: CPU seconds and address space one refused dump may cost (a Python start and a few hundred MiB
#: decompressed and counted take about two seconds).
CPU_LIMIT_S = 15
MEMORY_LIMIT = 3 * 2**30


def _dump_files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(FAULTY.iterdir())}


def _tar(path: Path, files: list[tuple[str, bytes]]) -> Path:
    """A .tar.gz of ``files`` in that order (a name may come twice), compressed fast."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _run(*argv: str) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """``ibdiag ARGV`` as a process of this checkout's ibdiag, under CPU and memory limits: the
    result, its CPU seconds and the peak resident memory of its own address space in bytes."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S * 2, CPU_LIMIT_S * 2))
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(ibdiag.__file__).resolve().parents[1]),
            PEAK_FILE_ENV: peak.name,
        }
        with (
            open(os.devnull, "w") as out,
            subprocess.Popen(
                [sys.executable, "-c", REPORTER, *argv],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=limit,
                env=env,
            ) as proc,
        ):
            assert proc.stderr is not None
            err = proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        peak_kib = int(peak.read() or "0")
    assert peak_kib > 0, f"the child wrote no peak: {err[-600:]}"
    done = subprocess.CompletedProcess(argv, proc.returncode, "", err)
    return done, usage.ru_utime + usage.ru_stime, peak_kib * 1024


def _member(files: dict[str, bytes], name: str, data: bytes) -> list[tuple[str, bytes]]:
    return [(name, data)] + [(n, d) for n, d in files.items() if n != name]


@pytest.mark.slow
@pytest.mark.parametrize(
    "what", ["255 MiB of short stderr lines", "a 255 MiB stderr line of 'query failed on'"]
)
def test_one_huge_stderr_member_costs_seconds_not_minutes(tmp_path: Path, what: str) -> None:
    """The issue's case: a 255 MiB ``ibqueryerrors.err`` in an archive of a megabyte or two."""
    size = 255 * 2**20
    if what.startswith("255 MiB of short"):
        pump = b"ibwarn: x\n"  # 26 million lines: past the 1,000,000 a tool's stderr may have
    else:
        pump = b"query failed on a"  # the old pattern scanned to the end from each occurrence
    data = pump * (size // len(pump))
    dump = _tar(tmp_path / "d.tar.gz", _member(_dump_files(), "ibqueryerrors.err", data + b"\n"))
    assert dump.stat().st_size < 3 * 2**20
    res, cpu_s, rss = _run("fabric", "--from", str(dump), "-o", "json")
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-600:]
    assert cpu_s < CPU_LIMIT_S, f"{what}: {cpu_s:.1f} CPU seconds"
    assert rss < 2**30, f"{what}: {rss >> 20} MiB"
    if what.startswith("255 MiB of short"):
        assert res.returncode == 2, (res.returncode, res.stderr[-600:])
        assert "ibqueryerrors.err' has more than 1,000,000 lines" in res.stderr
    else:
        # one line, cut at 1024 characters before any pattern: judged, the line shown as a note
        assert res.returncode == 1, (res.returncode, res.stderr[-600:])
    assert len(res.stderr) < 4000


@pytest.mark.slow
def test_a_dump_past_its_total_budget_is_refused_before_the_rest_is_read(tmp_path: Path) -> None:
    """Three files of 200 MiB, each under the 256 MiB a file may have: 600 MiB in all."""
    line = b"x" * 100_000 + b"\n"
    big = line * (200 * 2**20 // len(line))
    files = [(f"{tool}.err", big) for tool in ("ibnetdiscover", "iblinkinfo", "ibqueryerrors")]
    files += [(n, d) for n, d in _dump_files().items() if not n.endswith(".err")]
    dump = _tar(tmp_path / "d.tar.gz", files)
    res, cpu_s, rss = _run("fabric", "--from", str(dump), "-o", "json")
    assert res.returncode == 2, (res.returncode, res.stderr[-600:])
    assert "more than 512 MiB in all (at 'ibqueryerrors.err')" in res.stderr, res.stderr
    assert "hint:" in res.stderr
    assert cpu_s < CPU_LIMIT_S and rss < 2**30, (cpu_s, rss >> 20)


@pytest.mark.slow
def test_a_pasted_file_of_ten_million_lines_is_refused_unsplit(tmp_path: Path) -> None:
    """A plain ``--from FILE`` of stderr-looking lines (each kept as a skipped line before)."""
    paste = tmp_path / "net.txt"
    with open(paste, "wb") as f:
        f.write(b"ibwarn: x\n" * 10_000_000)
    try:
        res, cpu_s, rss = _run("fabric", "--from", str(paste))
    finally:
        paste.unlink()  # 100 MB: not left for pytest's rotation
    assert res.returncode == 2, (res.returncode, res.stderr[-600:])
    assert "/net.txt' has more than 8,000,000 lines" in res.stderr, res.stderr
    assert cpu_s < CPU_LIMIT_S and rss < 2**30, (cpu_s, rss >> 20)


def test_an_archive_with_a_file_twice_is_refused_naming_it(tmp_path: Path) -> None:
    files = _dump_files()
    clean = files["ibqueryerrors.out"]
    dump = _tar(
        tmp_path / "d.tar.gz",
        [*files.items(), ("ibqueryerrors.out", clean.replace(b"== 57]", b"== 0]"))],
    )
    r = run_cli("fabric", "--from", str(dump))
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert "'ibqueryerrors.out' is in the archive twice" in r.stderr
    assert "hint:" in r.stderr


def _deep_dump(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "deep"
    shutil.copytree(FAULTY, d)
    (d / "capture.json").write_text(body)
    return d


@pytest.mark.parametrize("option", ["--from", "--since", "--expect"])
@pytest.mark.parametrize(
    "body, words",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            '{"schema": "ibdiag.fabric-capture/1", "runs": [], "taken_at_s": ' + "9" * 5000 + "}",
            "digits",
        ),
        ("{" * 10 + "}" * 10, "not JSON"),
    ],
    ids=["deep", "huge int", "not JSON"],
)
def test_a_hostile_capture_json_is_exit_2_for_every_option_that_reads_it(
    tmp_path: Path, option: str, body: str, words: str
) -> None:
    bad = _deep_dump(tmp_path, body)
    argv = ["fabric", "--from", str(bad if option == "--from" else FAULTY)]
    if option != "--from":
        argv += [option, str(bad)]
    r = run_cli(*argv)
    assert r.exit_code == 2, (r.exit_code, r.stderr[-600:])
    assert "internal error" not in r.stderr and words in r.stderr, r.stderr[-600:]
    assert "capture.json" in r.stderr


def test_a_fifo_in_a_dump_directory_is_never_opened(tmp_path: Path) -> None:
    d = tmp_path / "d"
    shutil.copytree(FAULTY, d)
    fifo = d / "sminfo.err"
    fifo.unlink()
    os.mkfifo(fifo)
    opened, t = _blocked_writer(fifo)
    try:
        r = run_cli("fabric", "--from", str(d))
        assert not opened.wait(0.5), "fabric --from opened the FIFO"
        assert r.exit_code == 2 and "sminfo.err': a FIFO, not a regular file" in r.stderr, r.stderr
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # release the writer
        t.join(5)
        os.close(fd)


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/hostname"])
def test_a_link_in_a_dump_directory_is_refused_unread(tmp_path: Path, target: str) -> None:
    d = tmp_path / "d"
    shutil.copytree(FAULTY, d)
    (d / "saquery.out").unlink()
    (d / "saquery.out").symlink_to(target)
    r = run_cli("fabric", "--from", str(d))
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert "saquery.out': a symbolic link, not a regular file" in r.stderr


def test_a_dump_directory_past_its_total_budget_is_refused_by_size_unread(
    tmp_path: Path,
) -> None:
    """Sparse files: the sizes are checked before a byte is read (3 x 200 MiB read would take seconds)."""
    d = tmp_path / "d"
    shutil.copytree(FAULTY, d)
    for tool in ("ibnetdiscover", "iblinkinfo", "ibqueryerrors"):
        with open(d / f"{tool}.err", "wb") as f:
            f.truncate(200 * 2**20)
    t0 = time.process_time()
    r = run_cli("fabric", "--from", str(d))
    assert r.exit_code == 2 and "more than 512 MiB in all" in r.stderr, r.stderr[-400:]
    assert time.process_time() - t0 < 5


def test_the_file_named_is_read_through_a_link(tmp_path: Path) -> None:
    """The path the user gives may be a link (as every other input file's); a dump's own files not."""
    link = tmp_path / "net.txt"
    link.symlink_to(FAULTY / "ibnetdiscover.out")
    r = run_cli("fabric", "--from", str(link), "-o", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["findings"]


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab \n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029é"), max_size=60),
    st.booleans(),
)
def test_a_dump_file_s_lines_are_counted_as_splitlines_counts_them(text, ascii_only):
    # Budget.lines counts an ASCII text's breaks in one pass of bytes.translate (issue 39) and any
    # other text's break by break: both refuse exactly past the limit, as splitlines counts lines.
    from ibdiag.fabric.dump import Budget

    if ascii_only:
        text = text.encode("ascii", "ignore").decode()
    breaks = len(text.splitlines()) - (
        1 if text and text[-1] not in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029" else 0
    )
    Budget("d").lines(None, text, breaks)  # exactly at the limit: taken
    if breaks:
        with pytest.raises(InputError, match=f"has more than {breaks - 1:,} lines"):
            Budget("d").lines(None, text, breaks - 1)
