"""The ``ibdiag`` command line: the only package that prints or exits.

Importing this package registers every command on :data:`app`; each command module imports its
library lazily so that ``ibdiag --help`` and ``ibdiag topo`` stay fast.
"""

from ibdiag.cli.app import app, bench_app

# Command modules register themselves on `app` / `bench_app` when imported.
from ibdiag.cli import topo as _topo  # noqa: E402,F401
from ibdiag.cli import counters as _counters  # noqa: E402,F401
from ibdiag.cli import bench_p2p as _bench_p2p  # noqa: E402,F401
from ibdiag.cli import bench_collective as _bench_collective  # noqa: E402,F401
from ibdiag.cli import verdict as _verdict  # noqa: E402,F401
from ibdiag.cli import snapshot as _snapshot  # noqa: E402,F401
from ibdiag.cli import sweep as _sweep  # noqa: E402,F401
from ibdiag.cli import report as _report  # noqa: E402,F401

__all__ = ["app", "bench_app"]
