"""Who am I in the job? Rank, world size, local rank and rendezvous address from the launcher's environment.

Pure functions of an environment mapping (tests pass literal dicts). Launchers, in the order they are
recognised (an inner launcher wins: ``srun torchrun ...`` is a torchrun job, ``mpirun`` inside a Slurm
allocation is an Open MPI job):

* torchrun / torch.distributed.run: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``; the rendezvous store is hosted by torchrun's agent
  (``TORCHELASTIC_USE_AGENT_STORE=True``), not by rank 0.
* Open MPI (``mpirun``): ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE``.
* PMI (MPICH, Intel MPI, ``srun --mpi=pmi2``): ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``,
  ``MPI_LOCALNRANKS``.
* Slurm (``srun``): ``SLURM_PROCID``, ``SLURM_NTASKS`` (``SLURM_STEP_NUM_TASKS`` when set),
  ``SLURM_LOCALID``, ``SLURM_STEP_TASKS_PER_NODE``; only inside a job step (``SLURM_STEP_ID``), because a
  batch script also carries ``SLURM_PROCID=0`` and ``SLURM_NTASKS`` and must not wait for ranks that
  were never started.

The rendezvous host is ``MASTER_ADDR`` when set; under Slurm the first host of the step's node list
(``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``) with the bracket syntax expanded; under MPI on one
node 127.0.0.1. The port is ``MASTER_PORT`` when set; under Slurm ``20000 + job id mod 20000`` so two
jobs sharing a first node do not collide; else 29500 (torch's default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ibdiag import hostlists
from ibdiag.errors import UsageError
from ibdiag.hostlists import HostListError

DEFAULT_PORT = 29500
"""torch.distributed's default MASTER_PORT."""


@dataclass(frozen=True)
class LaunchEnv:
    launcher: str
    """``torchrun``, ``openmpi``, ``pmi``, ``slurm`` or ``ibdiag`` (ranks spawned by ``--nproc``)."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None
    """Ranks on this node, when the launcher says."""
    master_addr: str
    master_port: int
    agent_store: bool = False
    """The rendezvous store is served by the launcher (torchrun's agent, ibdiag's --nproc supervisor), so
    rank 0 connects to it as a client instead of serving it."""
    restart: int = 0
    """torchrun's restart count: keys of an earlier attempt are not mistaken for this one's."""
    local_rank_var: str | None = None
    """The variable the local rank came from (``LOCAL_RANK``, ``SLURM_LOCALID`` ...), None when defaulted:
    named when a rank cannot be bound to a GPU."""

    def to_json(self) -> dict[str, object]:
        return {
            "launcher": self.launcher,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
        }


# --- Slurm host lists ------------------------------------------------------------------------------


_NODELIST_HINT = (
    "expected the form node[01-03,07],gpu-a[1-2]; check SLURM_JOB_NODELIST / SLURM_STEP_NODELIST"
)


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list, expanded in order: ``node[01-03,07],gpu-a[1-2]`` ->
    ``node01 node02 node03 node07 gpu-a1 gpu-a2``; several bracket groups multiply
    (``r[1-2]n[1-2]`` -> ``r1n1 r1n2 r2n1 r2n2``), as ``scontrol show hostnames`` prints them
    (:mod:`ibdiag.hostlists`: at most 100,000 names, refused before expanding)."""
    try:
        return hostlists.expand(str(text))
    except HostListError as e:
        raise UsageError(
            f"cannot read Slurm node list {hostlists.excerpt(str(text))!r}: {e.problem}",
            hint=_NODELIST_HINT,
        ) from None


def first_node(text: str) -> str:
    """The first host of a Slurm host list, without expanding the rest (a 16384-node job's list)."""
    try:
        return hostlists.first(str(text))
    except HostListError as e:
        raise UsageError(
            f"cannot read Slurm node list {hostlists.excerpt(str(text))!r}: {e.problem}",
            hint=_NODELIST_HINT,
        ) from None


#: ``8(x2)``: tasks on each node, and how many nodes in a row run that many.
_TASKS_RE = re.compile(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?")


def parse_tasks_per_node(text: str) -> list[int]:
    """``SLURM_STEP_TASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE``: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``
    (at most as many nodes as a host list may name: ``1(x999999999)`` is refused, not a MemoryError)."""
    out: list[int] = []
    for item in str(text).split(","):
        m = _TASKS_RE.fullmatch(item.strip())
        if not m:
            raise UsageError(
                f"cannot read Slurm tasks per node {hostlists.excerpt(str(text))!r}",
                hint="expected the form 8(x2),4",
            )
        repeat = int(m.group(2) or 1)
        if len(out) + repeat > hostlists.MAX_NAMES:
            raise UsageError(
                f"Slurm tasks per node {hostlists.excerpt(str(text))!r} names more than "
                f"{hostlists.MAX_NAMES} nodes",
                hint="check SLURM_TASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE",
            )
        out.extend([int(m.group(1))] * repeat)
    return out


# --- detection --------------------------------------------------------------------------------------


def _int(env: Mapping[str, str], key: str, *, minimum: int = 0) -> int:
    raw = env.get(key, "")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise UsageError(
            f"environment variable {key}={raw!r} is not a whole number",
            hint="check how the launcher set it",
        ) from None
    if value < minimum:
        raise UsageError(
            f"environment variable {key}={raw!r} is below {minimum}",
            hint="check how the launcher set it",
        )
    return value


def _opt_int(env: Mapping[str, str], key: str, *, minimum: int = 0) -> int | None:
    if str(env.get(key, "")).strip() == "":
        return None
    return _int(env, key, minimum=minimum)


def _port(env: Mapping[str, str], default: int) -> int:
    if str(env.get("MASTER_PORT", "")).strip():
        if str(env["MASTER_PORT"]).strip() == "0":
            raise UsageError(
                "MASTER_PORT=0: the launcher did not pass the port it chose",
                hint="torchrun --master-port 0 hands 0 to its workers: use torchrun --standalone, or a fixed --master-port",
            )
        port = _int(env, "MASTER_PORT", minimum=1)
        if port > 65535:
            raise UsageError(
                f"MASTER_PORT={port} is not a TCP port", hint="use a port between 1024 and 65535"
            )
        return port
    return default


def _check(rank: int, world: int, local_rank: int, local_world: int | None, launcher: str) -> None:
    if world < 1:
        raise UsageError(
            f"{launcher}: world size {world} is below 1", hint="check how the job was launched"
        )
    if not 0 <= rank < world:
        raise UsageError(
            f"{launcher}: rank {rank} is outside 0..{world - 1}",
            hint="check how the job was launched",
        )
    if local_world is not None and not 0 <= local_rank < local_world:
        raise UsageError(
            f"{launcher}: local rank {local_rank} is outside 0..{local_world - 1}",
            hint="check how the job was launched",
        )


def detect_launch(env: Mapping[str, str]) -> LaunchEnv | None:
    """The launch this process is part of, or None when no launcher environment is present."""
    if env.get("RANK", "").strip() and env.get("WORLD_SIZE", "").strip():
        return _torchrun(env)
    if env.get("OMPI_COMM_WORLD_RANK", "").strip() and env.get("OMPI_COMM_WORLD_SIZE", "").strip():
        return _openmpi(env)
    if env.get("PMI_RANK", "").strip() and env.get("PMI_SIZE", "").strip():
        return _pmi(env)
    in_step = any(
        env.get(k, "").strip() not in ("", "batch", "extern")
        for k in ("SLURM_STEP_ID", "SLURM_STEPID")
    )
    if in_step and env.get("SLURM_PROCID", "").strip():
        return _slurm(env)
    return None


def _torchrun(env: Mapping[str, str]) -> LaunchEnv:
    """torchrun (or ibdiag's own launcher): RANK, WORLD_SIZE, MASTER_ADDR, LOCAL_RANK."""
    rank = _int(env, "RANK")
    world = _int(env, "WORLD_SIZE", minimum=1)
    local_rank = _opt_int(env, "LOCAL_RANK")
    local_world = _opt_int(env, "LOCAL_WORLD_SIZE", minimum=1)
    addr = env.get("MASTER_ADDR", "").strip()
    if not addr:
        if world == (local_world or 0):
            addr = "127.0.0.1"
        else:
            raise UsageError(
                "RANK and WORLD_SIZE are set but MASTER_ADDR is not",
                hint="set MASTER_ADDR to the host of rank 0 (torchrun sets it)",
            )
    launcher = "ibdiag" if env.get("IBDIAG_COLLECTIVE_REPORT_DIR") else "torchrun"
    agent = (
        env.get("TORCHELASTIC_USE_AGENT_STORE", "").strip().lower() == "true"
        or launcher == "ibdiag"
    )
    restart = _opt_int(env, "TORCHELASTIC_RESTART_COUNT") or 0
    lr = rank if local_rank is None else local_rank
    _check(rank, world, lr, local_world, launcher)
    return LaunchEnv(
        launcher,
        rank,
        world,
        lr,
        local_world,
        addr,
        _port(env, DEFAULT_PORT),
        agent,
        restart,
        None if local_rank is None else "LOCAL_RANK",
    )


def _openmpi(env: Mapping[str, str]) -> LaunchEnv:
    """Open MPI's mpirun: OMPI_COMM_WORLD_*."""
    rank = _int(env, "OMPI_COMM_WORLD_RANK")
    world = _int(env, "OMPI_COMM_WORLD_SIZE", minimum=1)
    local_rank = _opt_int(env, "OMPI_COMM_WORLD_LOCAL_RANK")
    local_world = _opt_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", minimum=1)
    addr = _mpi_master(env, world, local_world, "mpirun -x MASTER_ADDR=$(hostname) ...")
    lr = 0 if local_rank is None else local_rank
    _check(rank, world, lr, local_world, "Open MPI")
    return LaunchEnv(
        "openmpi",
        rank,
        world,
        lr,
        local_world,
        addr,
        _port(env, DEFAULT_PORT),
        local_rank_var=None if local_rank is None else "OMPI_COMM_WORLD_LOCAL_RANK",
    )


def _pmi(env: Mapping[str, str]) -> LaunchEnv:
    """A PMI launcher (MPICH, Intel MPI's mpiexec.hydra): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID."""
    rank = _int(env, "PMI_RANK")
    world = _int(env, "PMI_SIZE", minimum=1)
    local_rank = _opt_int(env, "MPI_LOCALRANKID")
    var = None if local_rank is None else "MPI_LOCALRANKID"
    local_world = _opt_int(env, "MPI_LOCALNRANKS", minimum=1)
    if local_rank is None and env.get("SLURM_LOCALID", "").strip():
        local_rank, var = _int(env, "SLURM_LOCALID"), "SLURM_LOCALID"
    addr = (
        env.get("MASTER_ADDR", "").strip()
        or _slurm_master(env)
        or _mpi_master(env, world, local_world, "mpiexec -genv MASTER_ADDR $(hostname) ...")
    )
    lr = 0 if local_rank is None else local_rank
    _check(rank, world, lr, local_world, "PMI")
    return LaunchEnv(
        "pmi",
        rank,
        world,
        lr,
        local_world,
        addr,
        _port(env, _slurm_port(env)),
        local_rank_var=var,
    )


def _slurm(env: Mapping[str, str]) -> LaunchEnv:
    """srun: SLURM_PROCID, the step's task count and tasks per node, the node list's first host."""
    rank = _int(env, "SLURM_PROCID")
    world_key = (
        "SLURM_STEP_NUM_TASKS" if env.get("SLURM_STEP_NUM_TASKS", "").strip() else "SLURM_NTASKS"
    )
    if not env.get(world_key, "").strip():
        raise UsageError(
            "SLURM_PROCID is set but SLURM_NTASKS is not",
            hint="launch with srun -n N (or --ntasks-per-node)",
        )
    world = _int(env, world_key, minimum=1)
    local_id = _opt_int(env, "SLURM_LOCALID")
    local_rank = local_id or 0
    local_world = None
    tpn = (
        env.get("SLURM_STEP_TASKS_PER_NODE", "").strip()
        or env.get("SLURM_TASKS_PER_NODE", "").strip()
    )
    node_id = _opt_int(env, "SLURM_NODEID")
    if tpn:
        per_node = parse_tasks_per_node(tpn)
        if node_id is not None and node_id < len(per_node):
            local_world = per_node[node_id]
    addr = env.get("MASTER_ADDR", "").strip() or _slurm_master(env)
    if not addr:
        raise UsageError(
            "srun job without a node list (SLURM_JOB_NODELIST) or MASTER_ADDR",
            hint="export MASTER_ADDR=<host of rank 0> before srun",
        )
    _check(rank, world, local_rank, local_world, "Slurm")
    return LaunchEnv(
        "slurm",
        rank,
        world,
        local_rank,
        local_world,
        addr,
        _port(env, _slurm_port(env)),
        local_rank_var=None if local_id is None else "SLURM_LOCALID",
    )


def _slurm_master(env: Mapping[str, str]) -> str | None:
    for key in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        text = env.get(key, "").strip()
        if text:
            return first_node(text)
    return None


def _slurm_port(env: Mapping[str, str]) -> int:
    job = env.get("SLURM_JOB_ID", "").strip() or env.get("SLURM_JOBID", "").strip()
    if job.isdigit():
        return 20000 + int(job) % 20000
    return DEFAULT_PORT


def _mpi_master(env: Mapping[str, str], world: int, local_world: int | None, example: str) -> str:
    addr = env.get("MASTER_ADDR", "").strip()
    if addr:
        return addr
    if local_world is not None and local_world == world:
        return "127.0.0.1"  # every rank on this node
    raise UsageError(
        "MPI launch across nodes without MASTER_ADDR: MPI does not tell a rank where rank 0 runs",
        hint=f"export MASTER_ADDR (the host of rank 0) to every rank: {example}",
    )
