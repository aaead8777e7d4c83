"""Fleet sweeps: which node, rail or link of a cluster is bad (``ibdiag sweep``).

The pieces, each pure and usable on its own:

* :mod:`~ibdiag.fleet.nodes` — who takes part: rank, hostname, address, rails (adapters in topo order);
* :mod:`~ibdiag.fleet.schedule` — which pairs meet in which round (ring, pairwise, random, second pass);
* :mod:`~ibdiag.fleet.runner` — the seam to the data path: :class:`~ibdiag.fleet.runner.PairRunner`
  runs one pair test; :func:`~ibdiag.fleet.sweep.run_sweep` drives a whole sweep through one;
* :mod:`~ibdiag.fleet.distributed` — the multi-node runtime: ranks placed by the launcher, coordinated
  through the rendezvous store (:mod:`~ibdiag.fleet.coord`, results checked by :mod:`~ibdiag.fleet.wire`),
  each pair over ibdiag's p2p (:mod:`~ibdiag.fleet.p2prunner`); :mod:`~ibdiag.fleet.progress` — rank 0's
  progress line; :mod:`~ibdiag.fleet.config` — the ``[sweep]`` settings;
* :mod:`~ibdiag.fleet.synthetic` — a named in-process fake runner with planted faults (scale tests);
* :mod:`~ibdiag.fleet.analysis` — robust statistics and node / link / unreachable attribution;
* :mod:`~ibdiag.fleet.checks` — findings (``sweep.*``); :mod:`~ibdiag.fleet.model` — the
  ``ibdiag.sweep/1`` document; :mod:`~ibdiag.fleet.render` and :mod:`~ibdiag.fleet.chart` — views;
  :mod:`~ibdiag.fleet.plan` — what ``--plan`` shows; :mod:`~ibdiag.fleet.untrusted` — checked JSON reading.

``--test collective`` runs a 2-rank gloo all_reduce per pair (:mod:`~ibdiag.fleet.collrunner`); NCCL per pair is not implemented.
"""
