"""Test hooks: make one rank slow, make it hang, or leave marks as ranks progress.

For ibdiag's own tests only (a real process made slow or stuck on purpose, so the straggler finding
and the timeout path are exercised for real). Set ``IBDIAG_TEST_HOOK`` to ``;``-separated items::

    slow:rank=2,seconds=0.02     rank 2 sleeps 20 ms before each timed collective (inside the timed loop)
    hang:rank=1,step=3           rank 1 sleeps forever when it reaches step 3 (steps count from 1)
    mark:dir=/tmp/marks          every rank touches DIR/rank<R>.step<K> when it reaches step K
    teardown:action=hang         a rank tearing down after a failure hangs there (destroy_process_group
                                 hanging on a broken communicator); action=abort: it dies by SIGABRT
                                 there (NCCL's watchdog); rank=R limits it to rank R

Without the variable nothing happens and nothing is slowed down.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.errors import UsageError

ENV = "IBDIAG_TEST_HOOK"


@dataclass(frozen=True)
class TestHooks:
    __test__ = False  # not a pytest test class

    slow: Mapping[int, float] = field(default_factory=dict)
    hang: Mapping[int, int] = field(default_factory=dict)
    mark_dir: str | None = None
    teardown: Mapping[int, str] = field(default_factory=dict)
    """rank (-1: every rank) -> ``hang`` or ``abort``."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TestHooks:
        text = (os.environ if env is None else env).get(ENV, "").strip()
        if not text:
            return cls()
        slow: dict[int, float] = {}
        hang: dict[int, int] = {}
        mark: str | None = None
        teardown: dict[int, str] = {}
        for item in filter(None, (s.strip() for s in text.split(";"))):
            name, _, args = item.partition(":")
            kv = {}
            for pair in filter(None, (a.strip() for a in args.split(","))):
                k, sep, v = pair.partition("=")
                if not sep:
                    raise UsageError(
                        f"{ENV}: cannot read {pair!r}",
                        hint="items look like slow:rank=2,seconds=0.02",
                    )
                kv[k.strip()] = v.strip()
            try:
                if name == "slow":
                    slow[int(kv["rank"])] = float(kv["seconds"])
                elif name == "hang":
                    hang[int(kv["rank"])] = int(kv["step"])
                elif name == "mark":
                    mark = kv["dir"]
                elif name == "teardown":
                    if kv["action"] not in ("hang", "abort"):
                        raise ValueError("action is hang or abort")
                    teardown[int(kv.get("rank", -1))] = kv["action"]
                else:
                    raise UsageError(
                        f"{ENV}: unknown hook {name!r}",
                        hint="hooks are slow, hang, mark and teardown",
                    )
            except (KeyError, ValueError) as e:
                raise UsageError(
                    f"{ENV}: bad item {item!r} ({e})",
                    hint="e.g. slow:rank=2,seconds=0.02;hang:rank=1,step=3",
                ) from None
        return cls(slow, hang, mark, teardown)

    @property
    def active(self) -> bool:
        return bool(self.slow or self.hang or self.mark_dir or self.teardown)

    def before_step(self, rank: int, step: int) -> None:
        if self.mark_dir:
            Path(self.mark_dir, f"rank{rank}.step{step}").touch()
        if self.hang.get(rank) == step:
            while True:  # the hung rank: only a signal ends it
                time.sleep(3600)

    def before_iteration(self, rank: int) -> None:
        delay = self.slow.get(rank)
        if delay:
            time.sleep(delay)

    def before_teardown(self, rank: int) -> None:
        action = self.teardown.get(rank, self.teardown.get(-1))
        if action == "abort":
            os.abort()
        if action == "hang":
            while True:
                time.sleep(3600)
