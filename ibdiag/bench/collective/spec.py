"""What ``bench collective`` runs: the op, backend, type, sizes and loop (:class:`RunSpec`), checked once.

The run's *spec* (what the user asked), as opposed to its *plan* (:mod:`.plan`), its *measurement*
(:mod:`.measurement`) and its *meta* (the JSON description, :mod:`ibdiag.bench.results.collective_meta`).

Building a RunSpec checks every field (a :class:`~ibdiag.errors.UsageError` naming the flag, exit 2),
so the command line and the ranks started by ``--nproc`` share the same bounds. Those ranks get their
job as JSON (:class:`RankJob`: the spec and the ``[collective]`` settings) in ``IBDIAG_COLLECTIVE_JOB``
instead of a command line rebuilt from the options.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.collectives import OPS, collective_dtype
from ibdiag.config import build_dataclass
from ibdiag.errors import InputError, UsageError
from ibdiag.jsonread import loads
from ibdiag.units import MAX_SIZE_BYTES, MAX_SIZES

BACKENDS = ("auto", "nccl", "gloo")
#: Most timed (and most untimed) calls per size (``--iters``, ``--warmup``).
MAX_ITERS = 1_000_000
#: Longest wait on any rank (``--timeout``), seconds: a day.
MAX_TIMEOUT_S = 86400.0
#: The variable that carries a rank's job from the ``--nproc`` supervisor.
JOB_ENV = "IBDIAG_COLLECTIVE_JOB"


def _whole(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


@dataclass(frozen=True)
class RunSpec:
    op: str
    """Canonical op name (``all_reduce``)."""
    backend: str
    """``auto``, ``nccl`` or ``gloo``."""
    dtype: str
    """torch's name (``float32``)."""
    sizes: tuple[int, ...]
    iters: int = 20
    warmup: int = 5
    blocking: bool = False
    check: bool = True
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise UsageError(
                f"unknown collective {self.op!r}", hint=f"use one of: {', '.join(OPS)}"
            )
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}", hint="use auto, nccl or gloo")
        if collective_dtype(self.dtype).name != self.dtype:
            raise UsageError(
                f"data type {self.dtype!r} is not torch's name",
                hint="use float32, bfloat16 or float16",
            )
        if (
            not isinstance(self.sizes, tuple)
            or not 1 <= len(self.sizes) <= MAX_SIZES
            or not all(_whole(s, 1, MAX_SIZE_BYTES) for s in self.sizes)
        ):
            raise UsageError(
                f"--sizes must be 1 to {MAX_SIZES} sizes of 1 byte to 1 PiB",
                hint="e.g. --sizes 1M:256M",
            )
        if not _whole(self.iters, 1, MAX_ITERS):
            raise UsageError(
                f"--iters {self.iters} is out of range",
                hint=f"use 1 to {MAX_ITERS} (nccl-tests' default is 20)",
            )
        if not _whole(self.warmup, 0, MAX_ITERS):
            raise UsageError(
                f"--warmup {self.warmup} is out of range",
                hint="use 0 or more untimed calls per size",
            )
        if not isinstance(self.blocking, bool) or not isinstance(self.check, bool):
            raise UsageError("blocking and check must be true or false")
        t = self.timeout_s
        if (
            isinstance(t, bool)
            or not isinstance(t, (int, float))
            or not math.isfinite(t)
            or not 0 < t <= MAX_TIMEOUT_S
        ):
            shown = f"{t:g}" if isinstance(t, (int, float)) and not isinstance(t, bool) else repr(t)
            raise UsageError(
                f"--timeout {shown} must be between 0 and {MAX_TIMEOUT_S:g} seconds",
                hint="e.g. --timeout 120",
            )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"sizes": list(self.sizes)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunSpec:
        """The spec from its JSON; UsageError (as building it) for a bad field, TypeError for a missing one."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - names)
        if unknown:
            raise UsageError(f"run spec has unknown fields {', '.join(unknown)}")
        sizes = doc.get("sizes")
        return cls(**{**doc, "sizes": tuple(sizes) if isinstance(sizes, list) else sizes})


@dataclass(frozen=True)
class RankJob:
    """What a rank started by ``--nproc`` runs: the spec, and the settings its analysis judges by."""

    spec: RunSpec
    config: CollectiveConfig

    def to_env(self) -> str:
        return json.dumps({"spec": self.spec.to_json(), "config": dataclasses.asdict(self.config)})

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RankJob:
        """The job in ``environ[JOB_ENV]``; InputError (exit 2) when it is missing or not a valid job."""
        text = environ.get(JOB_ENV)
        if not text:
            raise InputError(
                f"{JOB_ENV} is not set",
                hint="ranks started by --nproc get their job from the supervisor; run ibdiag bench collective --nproc N",
            )
        try:
            doc = loads(text)  # the budget: deep nesting or a 5000-digit number is a ValueError
            if (
                not isinstance(doc, dict)
                or not isinstance(doc.get("spec"), dict)
                or not isinstance(doc.get("config"), dict)
            ):
                raise ValueError("not a job object")
            return cls(
                RunSpec.from_json(doc["spec"]),
                build_dataclass(CollectiveConfig, doc["config"], where="[collective]"),
            )
        except (ValueError, TypeError, UsageError) as e:
            raise InputError(
                f"{JOB_ENV}: not a valid job ({getattr(e, 'message', e)})",
                hint="it is set by ibdiag bench collective --nproc; unset it",
            ) from None
