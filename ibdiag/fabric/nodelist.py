"""Slurm host lists for ``fabric`` and ``verdict --fabric`` (``--nodes``, default ``$SLURM_JOB_NODELIST``;
``--rank-order``; topology.conf's ``Nodes=``): :mod:`ibdiag.hostlists` (python-hostlist within a
budget checked before anything is expanded) with the usage error and hint a user sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from ibdiag import hostlists
from ibdiag.errors import InputError
from ibdiag.hostlists import MAX_NAMES, HostListError
from ibdiag.text import safe_excerpt

__all__ = ["HINT", "MAX_NAMES", "compress", "count", "expand", "expand_all"]

HINT = "a Slurm host list: gpu[01-64], gpu[01-08,17],login1 (as $SLURM_JOB_NODELIST)"


def _error(text: str, e: HostListError) -> InputError:
    return InputError(f"host list {safe_excerpt(text, 80)}: {e.problem}", hint=HINT)


def expand(text: str) -> list[str]:
    """The names, in the list's order, duplicates dropped; at most :data:`MAX_NAMES` (exit 2 beyond)."""
    try:
        return hostlists.expand(text)
    except HostListError as e:
        raise _error(text, e) from None


def count(text: str) -> int:
    """How many names the list stands for, counted without building them."""
    try:
        return hostlists.count(text)
    except HostListError as e:
        raise _error(text, e) from None


def expand_all(texts: Iterable[str]) -> list[str]:
    """Several lists read as one (``--rank-order FILE``: one a line), within one budget of names."""
    texts = list(texts)
    try:
        return hostlists.expand_all(texts)
    except HostListError as e:
        raise _error(", ".join(texts[:3]), e) from None


def compress(names: Iterable[str]) -> str:
    """The shortest usual form, as ``scontrol show hostlist`` prints it: ``gpu[01-03,07],login``."""
    try:
        return hostlists.compress(names)
    except HostListError as e:
        raise InputError(f"host names for Slurm: {e.problem}", hint=HINT) from None
