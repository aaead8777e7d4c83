"""ibdiag: is the scale-out fabric of a GPU node healthy, and is it what slows training down?

The public entry point is the ``ibdiag`` command (``ibdiag.cli:app``); the packages below it
(``topo``, ``counters``, ``bench``, ``importers``, ``verdict``) are pure libraries that read
through injected sources and return frozen models.
"""

__version__ = "0.1.0"
