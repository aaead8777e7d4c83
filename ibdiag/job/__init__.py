"""``ibdiag job``: the running job's own view — NCCL's RAS status and Inspector timings — placed on
the nodes, GPUs, NICs and leaf ports that ibdiag knows (topo JSON, a saved fabric).

Sources (each read as untrusted): the RAS text report and JSON status (:mod:`.rastext`,
:mod:`.rasjson`) from a file, from stdin or live from a RAS port (:mod:`.rasclient`); Inspector
JSONL files (:mod:`.inspector`). The library entry point is :func:`ibdiag.job.command.run`.
"""
