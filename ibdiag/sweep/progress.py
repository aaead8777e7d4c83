"""Rank 0's progress line while a sweep runs: round i of n, tests done, who went silent, ETA."""

from __future__ import annotations

from ibdiag.sweep.conduct import RoundDone


def eta_s(done: RoundDone, elapsed_s: float) -> float | None:
    """Seconds left at the mean round time so far; None before the first round is done."""
    finished = done.round + 1
    if finished <= 0 or elapsed_s <= 0:
        return None
    return max(0.0, (done.rounds_planned - finished) * elapsed_s / finished)


def progress_line(done: RoundDone, elapsed_s: float) -> str:
    """``sweep: round 2/4 (first pass), 6 tests done, 1 unreachable, 3.1 s elapsed, ETA 3 s``.

    The second pass's rounds are known only after the first pass, so during the first pass the count
    is the first pass's and the ETA does not include the second pass (it says so); the re-tests of
    what was slow beside other tests (the confirmation pass) are known only when they start."""
    phase = {"first": "first pass", "second": "second pass", "confirm": "re-tests alone"}[
        done.phase.value
    ]
    eta = eta_s(done, elapsed_s)
    parts = [
        f"sweep: round {done.round + 1}/{done.rounds_planned} ({phase})",
        f"{done.tests_done} tests done",
    ]
    if done.unreachable:
        parts.append(f"{len(done.unreachable)} unreachable")
    parts.append(f"{elapsed_s:.1f} s elapsed")
    if eta is not None:
        parts.append(f"ETA {eta:.0f} s" + (" + second pass" if done.phase.value == "first" else ""))
    return ", ".join(parts)
