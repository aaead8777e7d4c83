"""``ibdiag bench collective``: collective bus bandwidth the way nccl-tests measures it, through torch.distributed.

Modules (only ``runner`` imports torch.distributed, and only inside its functions):

* ``ops``       sizes per op, element counts, busbw factors (pure)
* ``launch``    rank/world/master from torchrun, Slurm, Open MPI, PMI environments (pure)
* ``runner``    process group, timing, validation, heartbeats, gathering (torch.distributed)
* ``validate``  known data in, wrong elements counted (torch tensors)
* ``spawn``     ``--nproc N``: local ranks as real processes, supervised
* ``model``     per-rank measurements; ``analysis`` -> BenchRun, stragglers, findings (pure)
* ``render``    nccl-tests' table, chart, CSV, Prometheus metrics (pure)
* ``hooks``     test hooks (slow / hung rank) for ibdiag's own tests
"""
