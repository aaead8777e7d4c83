"""Thresholds and expectations from a TOML file (``--config FILE`` or ``$IBDIAG_CONFIG``).

The file has one table per command::

    [ports]
    expected_rate_gbps = 400

    [topo]
    expect_adapters = 8

    [counters.thresholds]
    symbol_error = 5

Each command package declares its own frozen dataclass of settings with built-in defaults (every
default names its source in a comment) and reads its table with :meth:`Config.section`. Unknown
tables and keys are refused, so a typo never silently leaves a default in force. A key that moved
to another table (:data:`MOVED_KEYS`), or a table that was renamed (:data:`MOVED_TABLES`), is still
read under its new name, with a note in :attr:`Config.notes` that the command prints as a
deprecation warning.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from ibdiag.errors import InputError

#: The tables a config file may have, one per command.
SECTIONS = ("ports", "topo", "counters", "p2p", "collective", "verdict")

#: Renamed tables, old -> new. ``[bench]`` configured ``bench p2p`` only (``bench collective`` and
#: ``bench import`` read ``[collective]``), so it is called ``[p2p]`` (issue 13).
MOVED_TABLES: dict[str, str] = {"bench": "p2p"}

#: (old table, old key) -> (new table, new key). The port-health settings of topo and counters became
#: one ``[ports]`` table (issue 13): two tables judged the same ports two ways.
MOVED_KEYS: dict[tuple[str, str], tuple[str, str]] = {
    ("topo", "expected_rate_gbps"): ("ports", "expected_rate_gbps"),
    ("topo", "ignore_adapters"): ("ports", "ignore"),
    ("counters", "expected_rate_gbps"): ("ports", "expected_rate_gbps"),
    ("counters", "ignore_adapters"): ("ports", "ignore"),
}

C = TypeVar("C")


@dataclasses.dataclass(frozen=True)
class Config:
    source: Path | None
    raw: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    """Deprecation notes (old table and key names read as their new ones), for the command to print as warnings."""

    def section(self, name: str, cls: type[C]) -> C:
        """Build ``cls`` (a dataclass with defaults) from table ``[name]``, checking keys and types."""
        if name not in SECTIONS:
            raise ValueError(f"unknown config section {name!r}")
        table = self.raw.get(name, {})
        moved = "; ".join(f"{key} is now [{new_table}] {new_key}" for (old_table, key), (new_table, new_key) in MOVED_KEYS.items() if old_table == name)
        return build_dataclass(cls, table, where=f"[{name}]", source=self.source, moved=moved)


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load ``path`` (or ``$IBDIAG_CONFIG`` when ``path`` is None); no file means built-in defaults."""
    if path is None:
        env = os.environ.get("IBDIAG_CONFIG")
        if not env:
            return Config(None, {})
        path = env
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise InputError(f"config file {p}: no such file", hint="check --config or $IBDIAG_CONFIG") from None
    except OSError as e:
        raise InputError(f"config file {p}: cannot read: {e.strerror}", hint="check the file's permissions") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"config file {p}: not valid TOML: {e}", hint="see the README's Configuration section for an example") from None
    unknown = sorted(set(raw) - set(SECTIONS) - set(MOVED_TABLES))
    if unknown:
        raise InputError(
            f"config file {p}: unknown table {', '.join('[' + u + ']' for u in unknown)}",
            hint=f"the tables are {', '.join('[' + s + ']' for s in SECTIONS)}",
        )
    for name in (*SECTIONS, *MOVED_TABLES):
        if name in raw and not isinstance(raw[name], dict):
            raise InputError(f"config file {p}: {name} must be a table ([{name}])", hint=f"write [{name}] on its own line, then key = value lines")
    return move_keys(raw, p)


def move_keys(raw: Mapping[str, Any], source: Path | None) -> Config:
    """Read the :data:`MOVED_TABLES` and :data:`MOVED_KEYS` under their new names, with a note each. Two
    old places of one key merge when they agree (lists are joined); a table or key given under its old
    and its new name, or two different values, is an InputError: which one would win is exactly the
    ambiguity the move removes."""
    tables = {name: dict(table) for name, table in raw.items()}
    given: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    src = f"config file {source}: " if source else "config: "
    for old, new in MOVED_TABLES.items():
        if old not in tables:
            continue
        if new in tables:
            raise InputError(f"{src}[{old}] and [{new}] are both set", hint=f"[{old}] is the old name of [{new}]: keep [{new}] only")
        tables[new] = tables.pop(old)
        notes.append(f"{src}[{old}] is deprecated: it is read as [{new}]; rename the table")
    for (old_table, old_key), (new_table, new_key) in MOVED_KEYS.items():
        if old_key not in tables.get(old_table, {}):
            continue
        value = tables[old_table].pop(old_key)
        new = tables.setdefault(new_table, {})
        old_name, new_name = f"[{old_table}] {old_key}", f"[{new_table}] {new_key}"
        notes.append(f"{src}{old_name} is deprecated: it is read as {new_name}, which {old_table} and the other commands share")
        first = given.get((new_table, new_key))
        if new_key not in new:
            new[new_key] = value
        elif first is None:
            raise InputError(f"{src}{old_name} and {new_name} are both set", hint=f"{old_name} is the old name of {new_name}: keep {new_name} only")
        elif isinstance(value, list) and isinstance(new[new_key], list):
            new[new_key] = new[new_key] + [v for v in value if v not in new[new_key]]
        elif value != new[new_key]:
            raise InputError(f"{src}{first} and {old_name} differ ({new[new_key]!r} and {value!r})", hint=f"both are now {new_name}, one setting for every command: set it there once")
        given[(new_table, new_key)] = old_name
    return Config(source, tables, tuple(notes))


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str, source: Path | None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    src = f"config file {source}: " if source else "config: "
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where, source)
            except InputError as e:
                errors.append(e)
        raise errors[0] if errors else InputError(f"{src}{where} has an invalid value")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise InputError(f"{src}{where} must be true or false, not {value!r}", hint="write true or false without quotes")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InputError(f"{src}{where} must be a whole number, not {value!r}", hint="write a number without quotes")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise InputError(f"{src}{where} must be a number, not {value!r}", hint="write a number without quotes")
    if tp is str:
        if isinstance(value, str):
            return value
        raise InputError(f"{src}{where} must be a string, not {value!r}", hint='write the value in double quotes')
    if origin is tuple:
        if not isinstance(value, list):
            raise InputError(f"{src}{where} must be a list, not {value!r}", hint="write a list like [1, 2]")
        elem = args[0] if args else Any
        return tuple(_coerce(v, elem, f"{where}[{i}]", source) for i, v in enumerate(value))
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict,):
        if not isinstance(value, dict):
            raise InputError(f"{src}{where} must be a table, not {value!r}", hint="write it as a [section.key] table")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(v, vt, f"{where}.{k}", source) for k, v in value.items()}
    if tp is Any:
        return value
    raise TypeError(f"unsupported config field type {tp!r}")


def build_dataclass(cls: type[C], table: Mapping[str, Any], *, where: str, source: Path | None = None, moved: str = "") -> C:
    """``cls(**table)`` with type checks; mapping fields merge over their defaults (partial overrides).
    ``moved`` names keys that moved elsewhere, for the hint on an unknown key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(table) - set(fields))
    if unknown:
        src = f"config file {source}: " if source else "config: "
        raise InputError(
            f"{src}{where} has unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
            hint=f"the keys of {where} are: {', '.join(sorted(fields))}" + (f"; {moved}" if moved else ""),
        )
    kwargs: dict[str, Any] = {}
    for name, value in table.items():
        tp = hints[name]
        coerced = _coerce(value, tp, f"{where} {name}", source)
        if isinstance(coerced, dict):
            f = fields[name]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else (f.default if f.default is not dataclasses.MISSING else {})  # type: ignore[misc]
            if isinstance(default, Mapping):
                unknown_keys = sorted(set(coerced) - set(default)) if default else []
                if unknown_keys:
                    src = f"config file {source}: " if source else "config: "
                    raise InputError(
                        f"{src}{where} {name} has unknown key{'s' if len(unknown_keys) > 1 else ''} {', '.join(unknown_keys)}",
                        hint=f"the keys of {where} {name} are: {', '.join(sorted(default))}",
                    )
                coerced = {**default, **coerced}
        kwargs[name] = coerced
    return cls(**kwargs)
