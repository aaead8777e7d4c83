"""Fleet sweeps: which node, rail or link of a cluster is bad (``ibdiag sweep``).

The pieces, each pure and usable on its own:

* :mod:`~ibdiag.fleet.nodes` — who takes part: rank, hostname, address, rails (adapters in topo order);
* :mod:`~ibdiag.fleet.schedule` — which pairs meet in which round (ring, pairwise, random, second pass);
* :mod:`~ibdiag.fleet.runner` — the seam to the data path: :class:`~ibdiag.fleet.runner.PairRunner`
  runs one pair test; :func:`~ibdiag.fleet.sweep.run_sweep` drives a whole sweep through one;
* :mod:`~ibdiag.fleet.synthetic` — a named in-process fake runner with planted faults (scale tests);
* :mod:`~ibdiag.fleet.analysis` — robust statistics and node / link / unreachable attribution;
* :mod:`~ibdiag.fleet.checks` — findings (``sweep.*``); :mod:`~ibdiag.fleet.model` — the
  ``ibdiag.sweep/1`` document; :mod:`~ibdiag.fleet.render` and :mod:`~ibdiag.fleet.chart` — views;
  :mod:`~ibdiag.fleet.plan` — what ``--plan`` shows; :mod:`~ibdiag.fleet.untrusted` — checked JSON reading.

The multi-process runtime (ranks coordinated through torch.distributed, ibdiag's p2p per pair) is
not part of this build: ``ibdiag sweep`` says so (exit 3).
"""
