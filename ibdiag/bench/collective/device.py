"""The device behind a collective run, behind one seam: host memory (gloo), a CUDA GPU (NCCL), or the CPU stand-in.

The runner never touches ``torch.cuda`` itself; it asks a device for its tensors' ``torch.device``, the
process-group backend, timing events, free memory and its name. Three implementations:

* :class:`HostDevice` -- gloo on CPUs. No stream: every call returns when it is done (``queued`` False).
* :class:`CudaDevice` -- NCCL on the GPU this rank is bound to (:func:`choose_gpu`). Calls are queued on
  the stream; CUDA events time them and polled events bound every wait.
* :class:`CpuStandInDevice` -- **a test fake**, selected only by ``IBDIAG_TEST_DEVICE=cpu-stand-in``: it
  takes the CUDA branch of the runner (binding, the GPU claim, events, queue depth, the separate gloo
  control group, abort on failure) with ``cuda`` tensors mapped to CPU tensors and NCCL mapped to gloo.
  Its events are host timestamps taken when recorded. It proves the NCCL branch's control flow, never that
  NCCL or a GPU works; results it produces say so (backend ``nccl-stand-in``).

Rank-to-GPU binding (:func:`choose_gpu`): a rank that sees exactly one GPU binds to it (``srun
--gpus-per-task=1``, ``--gpu-bind=closest``, cgroup-constrained devices, MPI wrappers setting
``CUDA_VISIBLE_DEVICES`` per rank: each task sees one GPU while its local rank runs 0..7); one that sees
several binds to GPU ``local_rank``; a local rank beyond the visible GPUs is refused, naming the
variables. Two ranks of one host that end up on the same GPU are refused after binding
(:func:`claim_gpu`, one store ``compare_set`` per rank): NCCL does not run two ranks on one GPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ibdiag.errors import CannotRunError, NotSupportedError, UsageError
from ibdiag.runtime.launch import LaunchEnv
from ibdiag.runtime.torchdist import import_dist

TEST_DEVICE_ENV = "IBDIAG_TEST_DEVICE"
"""``cpu-stand-in`` or ``cpu-stand-in:gpus=N`` (N visible stand-in GPUs, default 8): ibdiag's own tests only."""
MIN_TORCH_FOR_NCCL = (2, 2)
"""``init_process_group(device_id=...)`` (the communicator bound to this rank's GPU at init) is torch 2.2+."""


def torch_version_tuple(text: str) -> tuple[int, int]:
    """``"2.13.0+cpu"`` -> ``(2, 13)``; ``(0, 0)`` when unreadable."""
    parts = str(text).split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def check_torch_for_nccl(version: str) -> None:
    """NotSupportedError (exit 3) for a torch too old for the NCCL path."""
    if torch_version_tuple(version) < MIN_TORCH_FOR_NCCL:
        need = ".".join(map(str, MIN_TORCH_FOR_NCCL))
        raise NotSupportedError(
            f"torch {version} is too old for --backend nccl: ibdiag binds each rank's communicator to its GPU (init_process_group(device_id=...), torch {need} or newer)",
            hint=f"install torch {need} or newer (the CUDA build), or use --backend gloo",
        )


# --- binding ---------------------------------------------------------------------------------------


def _visible_text(env: Mapping[str, str]) -> str:
    value = env.get("CUDA_VISIBLE_DEVICES")
    return "CUDA_VISIBLE_DEVICES unset" if value is None else f"CUDA_VISIBLE_DEVICES={value!r}"


def _local_rank_text(launch: LaunchEnv) -> str:
    var = launch.local_rank_var
    return (
        f"{var}={launch.local_rank}"
        if var
        else f"local rank {launch.local_rank} (no local-rank variable set: taken as {launch.local_rank})"
    )


def choose_gpu(launch: LaunchEnv, visible: int, env: Mapping[str, str]) -> int:
    """The index (among the visible GPUs) this rank binds to; CannotRunError naming the variables when none fits."""
    if visible < 1:
        raise CannotRunError(
            f"rank {launch.rank}: --backend nccl but no CUDA GPU is visible to this process ({_visible_text(env)})",
            hint="check nvidia-smi, the job's GPU request (srun --gpus-per-task / --gres) and CUDA_VISIBLE_DEVICES, or use --backend gloo",
        )
    if visible == 1:
        return 0  # the launcher gave this rank one GPU of its own (or a cgroup shows only it)
    if launch.local_rank < visible:
        return launch.local_rank
    raise CannotRunError(
        f"rank {launch.rank}: {_local_rank_text(launch)} but this process sees {visible} GPUs ({_visible_text(env)}): more ranks on this node than GPUs",
        hint=f"start at most {visible} ranks per node (one GPU per rank: torchrun --nproc-per-node {visible}, srun --ntasks-per-node {visible} --gpus-per-task=1), or use --backend gloo",
    )


def claim_gpu(
    store: Any,
    prefix: str,
    launch: LaunchEnv,
    host: str,
    gpu_id: str,
    index: int,
    env: Mapping[str, str],
) -> None:
    """Refuse a second rank on this host's GPU ``gpu_id``: one ``compare_set`` in the rendezvous store."""
    key = f"{prefix}gpu/{host}/{gpu_id}"
    mine = str(launch.rank)
    holder = store.compare_set(key, "", mine)
    holder = holder.decode("utf-8", "replace") if isinstance(holder, bytes) else str(holder)
    if holder != mine:
        raise CannotRunError(
            f"rank {launch.rank}: GPU {gpu_id} (cuda:{index}) on {host} is already rank {holder}'s ({_local_rank_text(launch)}, {_visible_text(env)}): "
            "NCCL does not run two ranks on one GPU",
            hint="give every rank its own GPU: one rank per GPU per node, srun --gpus-per-task=1, or a CUDA_VISIBLE_DEVICES per rank",
        )


# --- devices ---------------------------------------------------------------------------------------


class HostDevice:
    """gloo on CPUs: tensors in host memory, calls that return when done."""

    queued = False
    pg_backend = "gloo"
    label = "gloo"

    def bind(
        self,
        torch: Any,
        launch: LaunchEnv,
        env: Mapping[str, str],
        store: Any,
        prefix: str,
        host: str,
    ) -> Any:
        self.device = torch.device("cpu")
        return self.device

    def init_kwargs(self) -> dict[str, Any]:
        return {}

    def free_bytes(self, launch: LaunchEnv) -> tuple[str, int]:
        import psutil

        local = launch.local_world_size or 1
        return f"host memory shared by {local} local ranks", int(
            psutil.virtual_memory().available // local
        )

    def name(self) -> str:
        return "cpu"

    def versions(self) -> dict[str, str]:
        return {}


class CudaDevice:
    """NCCL on the GPU this rank is bound to."""

    queued = True
    pg_backend = "nccl"
    label = "nccl"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.index = -1
        self.device: Any = None

    def visible(self) -> int:
        return int(self.torch.cuda.device_count())

    def gpu_id(self, index: int) -> str:
        props = self.torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        if uuid:
            return str(uuid)
        return f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:{getattr(props, 'pci_device_id', 0):02x}"

    def set_device(self, index: int) -> None:
        self.torch.cuda.set_device(index)

    def bind(
        self,
        torch: Any,
        launch: LaunchEnv,
        env: Mapping[str, str],
        store: Any,
        prefix: str,
        host: str,
    ) -> Any:
        check_torch_for_nccl(str(torch.__version__))
        self.index = choose_gpu(launch, self.visible(), env)
        claim_gpu(store, prefix, launch, host, self.gpu_id(self.index), self.index, env)
        self.set_device(self.index)
        self.device = self.tensor_device(torch)
        return self.device

    def tensor_device(self, torch: Any) -> Any:
        return torch.device("cuda", self.index)

    def init_kwargs(self) -> dict[str, Any]:
        return {"device_id": self.torch.device("cuda", self.index)}

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def free_bytes(self, launch: LaunchEnv) -> tuple[str, int]:
        free, _ = self.torch.cuda.mem_get_info(self.index)
        return f"GPU cuda:{self.index}", int(free)

    def name(self) -> str:
        return f"cuda:{self.index} {self.torch.cuda.get_device_name(self.index)}"

    def versions(self) -> dict[str, str]:
        try:
            return {"nccl_version": ".".join(str(x) for x in self.torch.cuda.nccl.version())}
        except Exception:  # the version is a nicety
            return {}


@dataclass
class StandInEvent:
    """A CUDA event of the stand-in: complete at once, its time the host clock when it was recorded."""

    trace: list[str] | None = None
    t: float | None = None

    def record(self) -> None:
        self.t = time.perf_counter()
        if self.trace is not None:
            self.trace.append("record")

    def query(self) -> bool:
        if self.trace is not None:
            self.trace.append("wait")
        return self.t is not None

    def elapsed_time(self, end: StandInEvent) -> float:
        if self.t is None or end.t is None:
            raise RuntimeError("stand-in event not recorded")
        return (end.t - self.t) * 1e3


@dataclass
class CpuStandInDevice(CudaDevice):
    """FAKE, for ibdiag's tests: the CUDA branch with ``cuda`` tensors on the CPU and NCCL replaced by gloo.

    ``gpus`` stand-in GPUs exist on the "node"; ``CUDA_VISIBLE_DEVICES`` narrows them the way CUDA does, so
    the binding rules meet each launcher's environment. Proves control flow only.
    """

    torch: Any = None
    gpus: int = 8
    env: Mapping[str, str] = field(default_factory=dict)
    trace: list[str] | None = None
    index: int = -1
    device: Any = None

    pg_backend = "gloo"
    label = "nccl-stand-in"

    def _physical(self) -> list[str]:
        value = self.env.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return [str(i) for i in range(self.gpus)]
        out = []
        for item in value.split(","):
            item = item.strip()
            if not item.isdigit() or int(item) >= self.gpus:
                break  # CUDA stops at the first entry that names no device
            out.append(item)
        return out

    def visible(self) -> int:
        return len(self._physical())

    def gpu_id(self, index: int) -> str:
        return f"stand-in-gpu-{self._physical()[index]}"

    def set_device(self, index: int) -> None:
        if self.trace is not None:
            self.trace.append(f"set_device {index}")

    def tensor_device(self, torch: Any) -> Any:
        return torch.device("cpu")

    def init_kwargs(self) -> dict[str, Any]:
        return {}  # gloo takes no accelerator device_id; the torch-version check before binding still ran

    def event(self) -> Any:
        return StandInEvent(self.trace)

    def free_bytes(self, launch: LaunchEnv) -> tuple[str, int]:
        where, free = HostDevice().free_bytes(launch)
        return f"stand-in GPU cuda:{self.index} ({where})", free

    def name(self) -> str:
        return f"cuda:{self.index} CPU stand-in (test fake, {self.gpu_id(self.index)})"

    def versions(self) -> dict[str, str]:
        return {"device": "CPU stand-in for CUDA/NCCL (test fake)"}


def _stand_in(torch: Any, env: Mapping[str, str]) -> CpuStandInDevice | None:
    text = env.get(TEST_DEVICE_ENV, "").strip()
    if not text:
        return None
    name, _, args = text.partition(":")
    gpus = 8
    if name != "cpu-stand-in":
        raise UsageError(
            f"{TEST_DEVICE_ENV}={text!r}: unknown test device",
            hint="it is for ibdiag's tests: cpu-stand-in or cpu-stand-in:gpus=N; unset it",
        )
    if args:
        key, _, value = args.partition("=")
        if key != "gpus" or not value.isdigit():
            raise UsageError(
                f"{TEST_DEVICE_ENV}={text!r}: cannot read {args!r}", hint="cpu-stand-in:gpus=N"
            )
        gpus = int(value)
    return CpuStandInDevice(torch=torch, gpus=gpus, env=dict(env))


def select_device(requested: str, env: Mapping[str, str] | None = None) -> HostDevice | CudaDevice:
    """The device for ``--backend``: ``auto`` -> NCCL when CUDA GPUs and NCCL are present, else gloo."""
    env = os.environ if env is None else env
    torch, dist = import_dist()
    req = requested.lower()
    if req not in ("auto", "nccl", "gloo"):
        raise UsageError(f"unknown backend {requested!r}", hint="use auto, nccl or gloo")
    stand_in = _stand_in(torch, env)
    if stand_in is not None and req in ("auto", "nccl"):
        return stand_in
    if req == "gloo" or (
        req == "auto" and not (torch.cuda.is_available() and dist.is_nccl_available())
    ):
        if not dist.is_gloo_available():
            raise NotSupportedError(
                "--backend gloo: this PyTorch build has no gloo", hint="use --backend nccl"
            )
        return HostDevice()
    if not torch.cuda.is_available():
        raise CannotRunError(
            f"--backend nccl: no CUDA GPU is visible to this process ({_visible_text(env)})",
            hint="check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend gloo",
        )
    if not dist.is_nccl_available():
        raise NotSupportedError(
            "--backend nccl: this PyTorch build has no NCCL",
            hint="use --backend gloo, or a CUDA build of PyTorch",
        )
    return CudaDevice(torch)
