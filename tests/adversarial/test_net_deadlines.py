"""A server that hangs (SIGSTOP: no RST, the kernel still ACKs what fits in its buffers) is noticed
within the client's --timeout: one deadline per wait, not a fresh clock per blocked send slice.

The delay from SIGSTOP to the client's error line is held to a generous bound (T + 1 s: the kernel
still takes data into its buffers for a moment after the stop): a correctness bound, not a benchmark.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.adversarial.net_support import client_process, start_server

pytestmark = pytest.mark.slow

T = 3.0


@pytest.mark.parametrize(
    ("mode", "args", "waiting_for"),
    [
        ("bw", ["--sizes", "1M", "--duration", "30"], "1 MiB bandwidth test"),
        ("lat", ["--sizes", "64K", "--mode", "lat", "--duration", "30"], "64 KiB latency ping"),
    ],
)
def test_stopped_server_is_named_within_the_timeout(ibdiag_exe, mode, args, waiting_for):
    s = start_server(ibdiag_exe, "--timeout", "30")
    try:
        c = client_process(ibdiag_exe, s.port, *args, "-o", "json", "--timeout", f"{T:g}")
        s.log.wait_for(r"running tcp")
        time.sleep(1.0)  # well inside the measured phase
        s.signal(signal.SIGSTOP)
        t0 = time.monotonic()
        assert c.stderr is not None
        first = c.stderr.readline()  # the error line: when the client noticed
        waited = time.monotonic() - t0
        err = first + c.stderr.read()
        c.wait(T + 15)
        assert c.returncode == 3, err
        assert f"no answer from 127.0.0.1:{s.port} within {T:g} s" in err, err
        assert waiting_for in err, err
        assert "Traceback" not in err
        assert waited <= T + 1.0, (
            f"{mode}: the stopped server was noticed after {waited:.2f} s (timeout {T:g} s)"
        )
    finally:
        s.stop()
