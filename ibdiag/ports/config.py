"""``[ports]`` settings: which ports are judged, and the rate each must reach.

Example (every key optional)::

    [ports]
    expected_rate_gbps = 400             # every judged port; default: the fastest active port of its link layer
    expect_on = "gpu"                    # ... of these only (all, gpu, infiniband, ethernet, DEV patterns)
    ignore = ["mlx5_1*", "mlx5_3:1"]     # adapters (shell patterns) or DEV:PORT: read and shown, not judged
    skip = ["mlx5_12", "mlx5_13"]        # adapters never read at all (restricted functions)

    [ports.rates_gbps]                   # pattern -> Gb/s, first match wins, before expected_rate_gbps
    "mlx5_4*" = 100                      # e.g. a storage adapter on a slower network

The old keys ``[topo] expected_rate_gbps``/``ignore_adapters`` and ``[counters] expected_rate_gbps``/
``ignore_adapters`` are still read as these (``ibdiag.config.MOVED_KEYS``), with a deprecation warning.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from enum import Enum

from ibdiag.config import bounded, not_in_file, with_flags
from ibdiag.errors import InputError, UsageError
from ibdiag.parse import MAX_IB_RATE_GBPS

#: ``mlx5_1``, ``mlx5_*``, ``mlx5_3:1``, ``mlx5_3:*``: an adapter pattern, optionally ``:`` a port pattern.
_PATTERN_RE = re.compile(r"[^:\s]+(?::[0-9*?\[\]]+)?")


def _check_patterns(key: str, patterns: tuple[str, ...] | list[str]) -> None:
    for pat in patterns:
        if not _PATTERN_RE.fullmatch(pat):
            raise InputError(
                f"config [ports] {key}: {pat!r} is not DEV or DEV:PORT",
                hint='e.g. "mlx5_1*" (an adapter) or "mlx5_3:1" (one port)',
            )


def matches(pattern: str, adapter: str, port: int | None) -> bool:
    """Does ``pattern`` (``mlx5_1*`` or ``mlx5_3:1``) name this adapter, or this port of it?"""
    names = (adapter,) if port is None else (adapter, f"{adapter}:{port}")
    return any(fnmatch.fnmatchcase(n, pattern) for n in names)


#: An item of a ``SET`` list (:func:`parse_set`): ``mlx5_[0-3]``, ``mlx5_3:1``.
_SET_ITEM_RE = re.compile(r"[A-Za-z0-9_.*?\[\]-]{1,64}(?::[0-9*?\[\]]{1,8})?")
MAX_PATTERNS = 256

SET_HINT = (
    "give all, gpu (the GPU-facing adapters), infiniband (ib), ethernet (roce), "
    "or adapters: mlx5_0,mlx5_1 (shell patterns, DEV:PORT for one port)"
)


class SetKind(str, Enum):
    ALL = "all"
    GPU = "gpu"
    LINK_LAYER = "link_layer"
    NAMES = "names"


_LAYERS = {
    "infiniband": "InfiniBand",
    "ib": "InfiniBand",
    "ethernet": "Ethernet",
    "roce": "Ethernet",
}


@dataclass(frozen=True)
class AdapterSet:
    """A parsed ``SET``; ``ALL`` is the default and selects everything."""

    kind: SetKind = SetKind.ALL
    link_layer: str | None = None
    """``InfiniBand`` or ``Ethernet`` (the kernel's ``link_layer`` values) for ``LINK_LAYER``."""
    patterns: tuple[str, ...] = ()
    """``DEV`` or ``DEV:PORT`` shell patterns for ``NAMES``."""

    @property
    def is_all(self) -> bool:
        return self.kind is SetKind.ALL

    @property
    def spec(self) -> str:
        """As the option takes it: ``gpu``, ``infiniband``, ``mlx5_0,mlx5_1``."""
        if self.kind is SetKind.LINK_LAYER:
            return (self.link_layer or "").lower()
        if self.kind is SetKind.NAMES:
            return ",".join(self.patterns)
        return str(self.kind.value)

    @property
    def label(self) -> str:
        """How a finding names the adapters: ``GPU-facing``, ``InfiniBand``, ``mlx5_0,mlx5_1``; empty for all."""
        if self.kind is SetKind.GPU:
            return "GPU-facing"
        if self.kind is SetKind.LINK_LAYER:
            return self.link_layer or ""
        if self.kind is SetKind.NAMES:
            shown = ",".join(self.patterns[:4])
            return shown + (f",+{len(self.patterns) - 4} more" if len(self.patterns) > 4 else "")
        return ""


def parse_flag_set(text: str, flag: str) -> AdapterSet:
    """:func:`parse_set` for a command-line value: a bad one is a UsageError (exit 2) naming ``flag``."""
    try:
        return parse_set(text)
    except ValueError as e:
        raise UsageError(f"{flag}: {e}", hint=SET_HINT) from None


def parse_set(text: str) -> AdapterSet:
    """``gpu`` -> the GPU-facing set ...; a ValueError says what is wrong (the caller adds where and the hint)."""
    value = text.strip()
    if not value:
        raise ValueError("is empty")
    if len(value) > 4096:
        raise ValueError("is longer than 4096 characters")
    key = value.lower()
    if key == "all":
        return AdapterSet()
    if key == "gpu":
        return AdapterSet(SetKind.GPU)
    if key in _LAYERS:
        return AdapterSet(SetKind.LINK_LAYER, link_layer=_LAYERS[key])
    patterns = tuple(p.strip() for p in value.split(","))
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"names more than {MAX_PATTERNS} adapters")
    for pat in patterns:
        if not _SET_ITEM_RE.fullmatch(pat):
            shown = pat if pat.isprintable() and len(pat) <= 64 else repr(pat[:64])
            raise ValueError(f"{shown or '(empty item)'} is neither a set name nor DEV or DEV:PORT")
    return AdapterSet(SetKind.NAMES, patterns=tuple(dict.fromkeys(patterns)))


@dataclass(frozen=True)
class PortsConfig:
    """``[ports]`` (``load_config(path).section("ports", PortsConfig)``)."""

    expected_rate_gbps: float | None = bounded(None, low=0, low_open=True, high=MAX_IB_RATE_GBPS)
    """Rate every judged port must reach. Default: the highest rate among this node's active ports of
    the same link layer (a node is normally cabled uniformly, so a slower port is the odd one out)."""
    rates_gbps: dict[str, float] = bounded(
        default_factory=dict, low=0, low_open=True, high=MAX_IB_RATE_GBPS
    )
    """``DEV`` or ``DEV:PORT`` pattern -> the rate those ports must reach; the first matching pattern wins
    over ``expected_rate_gbps``. Ports named here are not peers of the others for the default."""
    ignore: tuple[str, ...] = ()
    """Adapters (``mlx5_1*``) or ports (``mlx5_3:1``) not judged: spares, unused storage ports. They are
    still read and shown; an ignored adapter's PCIe link is not judged either."""
    skip: tuple[str, ...] = ()
    """Adapters (shell patterns, no ``:PORT``) never read: nothing under their ``class/infiniband/NAME``
    is listed, opened or followed (:class:`ibdiag.node.sysfs.SysfsRoot`). For restricted functions
    whose counter reads make the kernel log ``ACCESS_REG ... failed`` on every read (DGX/HGX B200,
    GB200): ``ignore`` still reads them. A skipped adapter is not shown, counted or judged."""
    expect_on: str = "all"
    """Which ports ``expected_rate_gbps`` (``--expect-rate``) applies to, a SET (:func:`parse_set`):
    ``all`` (default), ``gpu`` (the GPU-facing adapters), ``infiniband``, ``ethernet`` or adapter
    patterns. The others keep the default (the fastest active port of their link layer among them), so
    ``expect_on = "gpu"`` with 400 judges a DGX's eight compute adapters and not its 200 Gb/s storage
    cards. ``--expect-on`` overrides it (and ``[topo] expect_on``)."""
    expected_rate_source: str = not_in_file("[ports] expected_rate_gbps")
    """Where ``expected_rate_gbps`` came from, as findings name it (``--expect-rate`` when the flag set it)."""

    def __post_init__(self) -> None:
        if self.expected_rate_gbps is not None and not self.expected_rate_gbps > 0:
            raise InputError(
                "config [ports] expected_rate_gbps must be positive",
                hint="e.g. expected_rate_gbps = 400",
            )
        _check_patterns("ignore", self.ignore)
        _check_patterns("skip", self.skip)
        for pat in self.skip:
            if ":" in pat:
                raise InputError(
                    f"config [ports] skip: {pat!r} names a port; skip takes adapters",
                    hint='e.g. skip = ["mlx5_12"] (the whole function is never read); ignore takes DEV:PORT',
                )
        try:
            parse_set(self.expect_on)
        except ValueError as e:
            raise InputError(f"config [ports] expect_on: {e}", hint=SET_HINT) from None
        _check_patterns("rates_gbps", list(self.rates_gbps))
        for pat, rate in self.rates_gbps.items():
            if not rate > 0:
                raise InputError(
                    f"config [ports] rates_gbps {pat!r} = {rate:g} must be positive",
                    hint='e.g. "mlx5_4*" = 100',
                )

    def with_expected_rate(
        self, rate_gbps: float | None, *, flag: str = "--expect-rate"
    ) -> PortsConfig:
        """The command line's ``--expect-rate`` over the file's ``expected_rate_gbps`` (patterns in
        ``rates_gbps`` still win for the ports they name); unchanged when the flag was not given."""
        if rate_gbps is None:
            return self
        return replace(
            with_flags(self, {"expected_rate_gbps": (flag, rate_gbps)}), expected_rate_source=flag
        )

    def with_expect_on(self, spec: str | None, *, flag: str = "--expect-on") -> PortsConfig:
        """The command line's ``--expect-on`` over the file's ``expect_on``; unchanged when not given."""
        if spec is None:
            return self
        return replace(self, expect_on=parse_flag_set(spec, flag).spec)

    @property
    def expect_set(self) -> AdapterSet:
        """``expect_on``, parsed."""
        return parse_set(self.expect_on)

    def ignored(self, adapter: str, port: int | None = None) -> bool:
        """Is this port left unjudged? With ``port`` None: is the whole adapter (its PCIe link, its
        device-level counters) — a pattern that names the adapter, not ``DEV:PORT``."""
        return any(matches(pat, adapter, port) for pat in self.ignore)

    def configured_rate(self, adapter: str, port: int) -> tuple[float, str] | None:
        """The rate a ``rates_gbps`` pattern gives this port, and the pattern; None when none matches."""
        for pat, rate in self.rates_gbps.items():
            if matches(pat, adapter, port):
                return float(rate), pat
        return None
