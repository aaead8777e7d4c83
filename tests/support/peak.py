"""A child process's own peak resident memory.

``getrusage``'s ``ru_maxrss`` survives ``execve``: a child forked from a pytest process that has grown
to a gigabyte reports that gigabyte as its own peak, whatever it did after ``exec``. The kernel's
``VmHWM`` belongs to the address space, which ``execve`` replaces, so it counts only what the child's
program touched. :data:`REPORTER` is code a child runs first: at exit it writes its ``VmHWM`` (KiB) to
the file named by ``IBDIAG_TEST_PEAK_FILE``."""

from __future__ import annotations

from pathlib import Path

PEAK_FILE_ENV = "IBDIAG_TEST_PEAK_FILE"


def vm_hwm_kib(status: str = "/proc/self/status") -> int:
    """The peak resident size of this process's address space, in KiB."""
    for line in Path(status).read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM line in {status}")


#: Run as ``python -c REPORTER ARGS...``: ``ibdiag ARGS`` in this process, its peak written at exit.
#: Self-contained (it imports nothing of this checkout's tests), so a benchmark can run it with another
#: checkout's ibdiag on ``PYTHONPATH`` (benchmarks/fabric_selene.py).
REPORTER = (
    "import atexit, os, runpy, sys\n"
    "def _peak():\n"
    "    with open('/proc/self/status') as f:\n"
    "        kib = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
    f"    with open(os.environ[{PEAK_FILE_ENV!r}], 'w') as out:\n"
    "        out.write(kib)\n"
    "atexit.register(_peak)\n"
    "sys.argv[0] = 'ibdiag'\n"
    "runpy.run_module('ibdiag', run_name='__main__', alter_sys=True)\n"
)
