"""``ibdiag bench collective``: collective bus bandwidth the way nccl-tests measures it, through torch.distributed.

Modules (only ``torchdist`` imports torch.distributed, and only inside its functions; the op and
element-type facts are :mod:`ibdiag.collectives`):

* ``spec``      what to run (RunSpec, checked) and the job a ``--nproc`` rank gets (RankJob)
* ``plan``      sizes per op, element counts, buffer bytes (pure)
* ``launch``    rank/world/master from torchrun, Slurm, Open MPI, PMI environments (pure)
* ``torchdist`` the torch.distributed adapter: import, backend, rendezvous store, the call per op
* ``liveness``  heartbeats in the store, who did not answer, the watchdog
* ``runner``    the rank loop: process group, timing, validation, gathering
* ``validate``  known data in, wrong elements counted (torch tensors)
* ``spawn``     ``--nproc N``: local ranks as real processes, supervised
* ``model``     per-rank measurements; ``analysis`` -> BenchRun, stragglers, findings (pure)
* ``meta``      the typed ``kind: collective`` fields of a BenchRun (measured or imported)
* ``render``    the collective view: nccl-tests' table, chart, CSV, Prometheus metrics (pure)
* ``hooks``     test hooks (slow / hung rank) for ibdiag's own tests
"""
