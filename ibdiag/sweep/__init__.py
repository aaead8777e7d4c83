"""Fleet sweeps: which node, rail or link of a cluster is bad (``ibdiag sweep``).

The pieces, each pure and usable on its own:

* :mod:`~ibdiag.sweep.nodes` — who takes part: rank, hostname, address, rails (adapters in topo order);
* :mod:`~ibdiag.sweep.schedule` — which pairs meet in which round (ring, pairwise, random, second pass);
* :mod:`~ibdiag.sweep.runner` — the seam to the data path: :class:`~ibdiag.sweep.runner.PairRunner`
  runs one pair test; :func:`~ibdiag.sweep.passes.run_sweep` drives a whole sweep through one;
* :mod:`~ibdiag.sweep.distributed` — the multi-node runtime: ranks placed by the launcher, coordinated
  through the rendezvous store (:mod:`~ibdiag.sweep.coord`, results checked by :mod:`~ibdiag.sweep.wire`),
  each pair over ibdiag's p2p (:mod:`~ibdiag.sweep.p2prunner`); :mod:`~ibdiag.sweep.progress` — rank 0's
  progress line; :mod:`~ibdiag.sweep.config` — the ``[sweep]`` settings;
* :mod:`~tests.support.synthetic_fabric` — a named in-process fake runner with planted faults (scale tests);
* :mod:`~ibdiag.sweep.analysis` — robust statistics and node / link / unreachable attribution;
* :mod:`~ibdiag.sweep.checks` — findings (``sweep.*``); :mod:`~ibdiag.sweep.model` — the
  ``ibdiag.sweep/1`` document; :mod:`~ibdiag.sweep.views`, :mod:`~ibdiag.sweep.matrix` and
  :mod:`~ibdiag.sweep.chart` — views; :mod:`~ibdiag.sweep.plan` — what ``--plan`` shows; JSON from
  other ranks and files is read by :mod:`ibdiag.jsonread`;
* :mod:`~ibdiag.sweep.command` — the entry point: ``run(SweepRequest)`` (this rank's part; rank 0 gets
  the result) and ``plan(SweepRequest)``.

``--test collective`` runs a 2-rank gloo all_reduce per pair (:mod:`~ibdiag.sweep.collrunner`); NCCL per pair is not implemented.
"""
