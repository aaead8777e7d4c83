"""Check ids and the functions that emit them: each package's ``CHECKS`` registry, and the list of all.

A check id (``topo.pcie_width``) is what CI and dashboards key on. Each package that emits findings
keeps one registry, in the module that holds its checks::

    CHECKS = CheckRegistry("topo")

    @CHECKS.check("topo.pcie_width", "device trained narrower than it and its upstream port support: fail")
    def pcie_width(subject: str, dev: PciDevice) -> Finding | None:
        ...

A check is one function: the decorator records the id, a one-line summary and the function, and the
function it returns always gives a list of findings (its own return may be a finding, findings, or
None) and raises ``RuntimeError`` — a bug, not bad input — if it ever returns a finding of another id.
The package's entry point (``check_topology``, ``check_snapshot`` ...) calls its check functions in the
order the findings are shown.

``CHECKS.declare(id, summary)`` registers an id whose findings come from code that is not (yet) one
function per id (the bench packages). Every registered id is documented in README.md or docs/, and
every id ibdiag can emit is registered: ``tests/findings/test_registry.py`` checks both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import ParamSpec

from ibdiag.findings.model import Finding

P = ParamSpec("P")
#: What a check function may return: one finding, several, or none.
CheckOutput = Finding | Iterable[Finding] | None


@dataclass(frozen=True)
class Check:
    id: str
    """``topo.pcie_width``: ``<prefix>.<name>``."""
    summary: str
    """One line: what is judged and how severe it is."""
    function: Callable[..., list[Finding]] | None = None
    """The function that emits it; None for an id registered with :meth:`CheckRegistry.declare`."""


class CheckRegistry:
    """One package's check ids, in the order they were registered."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._checks: dict[str, Check] = {}

    def _add(self, check: Check) -> None:
        if not check.id.startswith(self.prefix + "."):
            raise ValueError(f"check id {check.id!r} does not start with {self.prefix!r}.")
        if check.id in self._checks:
            raise ValueError(f"check id {check.id!r} is registered twice")
        self._checks[check.id] = check

    def check(
        self, check_id: str, summary: str
    ) -> Callable[[Callable[P, CheckOutput]], Callable[P, list[Finding]]]:
        """Register the decorated function as the one that emits ``check_id``. The function returned
        keeps the decorated one's parameters (``ParamSpec``): mypy checks every call of a check."""

        def register(fn: Callable[P, CheckOutput]) -> Callable[P, list[Finding]]:
            @functools.wraps(fn)
            def run(*args: P.args, **kwargs: P.kwargs) -> list[Finding]:
                out = _as_list(fn(*args, **kwargs))
                for f in out:
                    if f.check != check_id:
                        raise RuntimeError(
                            f"{fn.__module__}.{fn.__qualname__} is check {check_id} but returned a {f.check} finding"
                        )
                return out

            self._add(Check(check_id, summary, run))
            return run

        return register

    def declare(self, check_id: str, summary: str) -> None:
        """Register an id emitted by code that is not one function per id."""
        self._add(Check(check_id, summary))

    def __iter__(self) -> Iterator[Check]:
        return iter(self._checks.values())

    def __contains__(self, check_id: object) -> bool:
        return check_id in self._checks

    def __len__(self) -> int:
        return len(self._checks)

    def ids(self) -> tuple[str, ...]:
        return tuple(self._checks)

    def get(self, check_id: str) -> Check:
        return self._checks[check_id]


def _as_list(result: CheckOutput) -> list[Finding]:
    if result is None:
        return []
    if isinstance(result, Finding):
        return [result]
    return list(result)
