"""Names in one short Slurm host list (``gpu[06-09]``, ``mlx5_[0-11]``), as ``scontrol show hostlist``
writes them: python-hostlist's ``collect_hostlist`` where that package is installed (it also folds
suffixes, ``gpu[01-02].cluster``, and ranges across digit widths, ``mlx5_[0-11]``), else ibdiag's own
collector (:func:`ibdiag.fabric.nodelist.compress`). Either expands back to the same names
(``scontrol show hostnames``, :func:`ibdiag.fabric.nodelist.expand`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from types import ModuleType

from ibdiag.fabric.nodelist import compress


def _optional(name: str) -> ModuleType | None:
    """python-hostlist where installed (not a dependency: ibdiag's collector stands in for it)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_hostlist = _optional("hostlist")

#: A name a host list can hold: anything else (brackets, commas, spaces) is listed as it is.
_PLAIN = re.compile(r"[A-Za-z0-9._-]+")


def host_list(names: Iterable[str]) -> str:
    """The names (duplicates dropped) as one host list; names a host list cannot hold are appended
    after it, comma-separated, as they are."""
    unique = sorted(set(names))
    plain = [n for n in unique if _PLAIN.fullmatch(n)]
    odd = [n for n in unique if not _PLAIN.fullmatch(n)]
    return ",".join(([collect(plain)] if plain else []) + odd)


def collect(names: list[str]) -> str:
    """python-hostlist's collector where installed, else :func:`~ibdiag.fabric.nodelist.compress`."""
    if _hostlist is not None:
        try:
            return str(_hostlist.collect_hostlist(names))
        except Exception:  # a third-party failure on odd names: our own collector answers
            pass
    return compress(names)


def collector() -> str:
    """Which collector :func:`host_list` uses (``python-hostlist 2.3.0`` or ``ibdiag``), for the docs' tests."""
    if _hostlist is None:
        return "ibdiag"
    return f"python-hostlist {getattr(_hostlist, '__version__', '?')}"
