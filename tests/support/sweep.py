"""A sweep job on this host: a free loopback port for rank 0's rendezvous store, and the environment
of one rank of a Slurm-style job over loopback (the launcher variables of other launchers removed).
"""

from __future__ import annotations

from tests.support.p2p import client_env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def slurm_env(rank: int, world: int, port: int) -> dict[str, str]:
    env = client_env(
        {
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_STEP_ID": "0",
            "SLURM_LOCALID": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    for key in (
        "RANK",
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "IBDIAG_CONFIG",
        "IBDIAG_TEST_HOOK",
    ):
        env.pop(key, None)
    return env
