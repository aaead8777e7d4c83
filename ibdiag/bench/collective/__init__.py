"""``ibdiag bench collective``: collective bus bandwidth the way nccl-tests measures it, through torch.distributed.

Modules (torch.distributed is reached only through :mod:`ibdiag.runtime.torchdist`, which also holds
launcher detection and the test hooks beside it in :mod:`ibdiag.runtime`; the op and element-type
facts are :mod:`ibdiag.collectives`). A run is described in four words, each with one meaning:

* ``spec``         what the user asked: op, backend, sizes, loop (RunSpec, checked) and the job a
  ``--nproc`` rank gets (RankJob)
* ``plan``         what each requested size becomes: element counts, buffer bytes (pure)
* ``measurement``  what the ranks measured, per rank (pure)
* ``meta``         the JSON description of a run beside its rows: :mod:`ibdiag.bench.results.collective_meta`
  (shared with imported nccl-tests logs, as are ``[collective]`` settings,
  :mod:`ibdiag.bench.results.collective_config`)

and the rest:

* ``liveness``  heartbeats in the store, who did not answer, the watchdog
* ``runner``    the rank loop: process group, timing, validation, gathering (``rank``, ``device``,
  ``timing``, ``netif`` its parts)
* ``validate``  known data in, wrong elements counted (torch tensors)
* ``spawn``     ``--nproc N``: local ranks as real processes; ``supervise`` watches them
* ``analysis``  measurement -> BenchRun, stragglers, findings (pure)
* ``views``     the collective view: nccl-tests' table, chart, CSV, Prometheus metrics (pure)
* ``command``   the entry point of ``ibdiag bench collective``: this process as a rank, a supervisor
  of ``--nproc`` ranks or one of those ranks
"""
