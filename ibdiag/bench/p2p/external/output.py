"""What a C tool printed, read the same way for every tool: its complaint when it failed, an exit status in
words, and the error that says its output held no result (the run is tried again)."""

from __future__ import annotations

import re
import signal

from ibdiag.errors import CannotRunError

_ROW_PREFIX = re.compile(r"^\s*\d+(?:\s+[\d.]+)+(?=[A-Za-z])")
#: ANSI colour sequences (sockperf colours its summary lines).
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")


def status_text(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by signal {rc * -1} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def plain(output: str) -> str:
    """``output`` without ANSI colour sequences."""
    return _ANSI.sub("", output)


def error_lines(output: str, limit: int = 3) -> str:
    """The tool's own complaint from its output: the lines that say what failed, else the last lines."""
    # perftest may print its complaint right after a table row, on the same line ("65536 0 0.00 ... 0.000000ethernet_read_keys: ...").
    lines = [_ROW_PREFIX.sub("", ln).strip() for ln in plain(output).splitlines()]
    lines = [ln for ln in lines if ln and not set(ln) <= set("-*")]
    bad = [
        ln
        for ln in lines
        if re.search(
            r"(?i)couldn't|could not|can't|unable|fail|error|not |invalid|should be|no ", ln
        )
    ]
    picked = (bad or lines)[-limit:] if (bad or lines) else ["(no output)"]
    return "; ".join(ln[:200] for ln in picked)


class UnreadableResult(CannotRunError):
    """The tool ended well but its output holds no readable result for the size (under emulation
    ib_write_lat now and then prints ``inf`` or no row at all, ib_send_bw a 0.00 average): the run
    is tried again (:func:`ibdiag.bench.p2p.external.drive.run_again_if_unreadable`)."""


#: Extra runs of one size and kind whose output was unreadable (every command run is listed in the
#: result's ``<tool>_commands``, so a repeated run shows there).
UNREADABLE_RETRIES = 2
