"""Helpers shared by the tests (no tests here); tests/conftest.py turns the ones a test asks for by name
into fixtures.

* ``env`` — the repository's paths (``REPO``, ``FIXTURES``, ``SYSFS_FIXTURES``) and ``need_root`` /
  ``need_tool`` (skip here, fail under ``IBDIAG_TEST_STRICT=1``);
* ``cli`` — ``run_cli``: ``ibdiag`` in-process through ``main(argv, env)``, a fake terminal included;
* ``p2p`` — p2p servers in a thread or a process, log watching, the named ``FakeRdmaEndpoint``;
* ``counters`` — counter trees (``node``, ``write``); ``sweep`` — a Slurm-style job on loopback;
* ``fleet_fixtures`` — the fixture fleet of the ``ibdiag report`` tests (the ``fleet_dir`` fixture);
* ``synthetic_fabric`` — the named in-process fake fabric of the sweep tests and benchmarks;
* ``verdict_oracle`` — verdict's overlap model simulated step by step;
* ``nccl_hca`` — NCCL_IB_HCA read back the way NCCL reads it;
* ``biglog`` — a long nccl-tests log for the streaming tests and benchmark.
"""
