"""The ``ibdiag`` command line: the only package that prints or exits.

:data:`app` is the typer application. Command modules register themselves on it (or on
:data:`bench_app`) when imported, and :class:`ibdiag.cli.app.LazyGroup` imports each one only when
its command is used, so that ``ibdiag --help`` and ``ibdiag topo`` stay fast; each command module in
turn imports its library lazily.
"""

from ibdiag.cli.app import COMMANDS, SHORT_HELP, app, bench_app

__all__ = ["COMMANDS", "SHORT_HELP", "app", "bench_app"]
