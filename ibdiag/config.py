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

Values are checked generically at load, before any command sees them: numbers must be finite
(``nan`` would switch a check off, ``inf`` fail every port), 64-bit integers (as TOML demands), and
not negative — unless a field declares its own range with :func:`bounded`; strings and lists have a
length cap. The file must be UTF-8 text of at most 1 MiB, nested at most 16 levels.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ibdiag.errors import InputError, UsageError
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.text import safe_excerpt, safe_value

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: The tables a config file may have, one per command.
SECTIONS = (
    "ports",
    "topo",
    "counters",
    "history",
    "fabric",
    "p2p",
    "collective",
    "verdict",
    "sweep",
    "job",
)

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

#: Largest config file read (a real one is a few hundred bytes).
MAX_CONFIG_BYTES = 2**20
#: Deepest nesting of tables and lists (ibdiag's own schema needs 3: [counters.thresholds] key = 1).
MAX_NESTING = 16
#: Longest string, and most items in one list, a config value may have.
MAX_STRING_CHARS = 4096
MAX_LIST_ITEMS = 4096
#: TOML integers are 64-bit signed (toml.io: "Arbitrary 64-bit signed integers").
INT64_MAX = 2**63 - 1

_BOUNDS_KEY = "ibdiag.bounds"


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The range a numeric config field (or each value of a mapping field) may take."""

    low: float | None = 0
    high: float | None = None
    low_open: bool = False
    """``low`` itself is not allowed (``> 0`` rather than ``>= 0``)."""

    def check(self, value: float) -> str | None:
        """Why ``value`` is out of range, or None."""
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            if self.low == 0 and not self.low_open:
                return "must not be negative"
            return f"must be {'above' if self.low_open else 'at least'} {self.low:g}"
        if self.high is not None and value > self.high:
            return f"must be at most {self.high:g}"
        return None


#: Numbers without declared bounds: any finite value from 0 up.
DEFAULT_BOUNDS = Bounds()


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    low: float | None = 0,
    high: float | None = None,
    low_open: bool = False,
    **kw: Any,
) -> Any:
    """A dataclass field whose numbers must lie in ``[low, high]`` (``(low, high]`` with ``low_open``)::

        expected_rate_gbps: float | None = bounded(None, low=0, low_open=True, high=2400)

    ``low=None`` allows negative numbers. Works for mapping fields too (each value is checked)."""
    metadata = {**kw.pop("metadata", {}), _BOUNDS_KEY: Bounds(low, high, low_open)}
    if default is not dataclasses.MISSING:
        kw["default"] = default
    return dataclasses.field(metadata=metadata, **kw)


_NOT_IN_FILE_KEY = "ibdiag.not_in_file"


def not_in_file(default: Any) -> Any:
    """A settings field the command sets, never the file (e.g. which flag a value came from): a config
    key of that name is refused like any unknown key."""
    return dataclasses.field(default=default, metadata={_NOT_IN_FILE_KEY: True})


C = TypeVar("C", bound="DataclassInstance")


def with_flags(obj: C, flags: Mapping[str, tuple[str, Any]]) -> C:
    """``obj`` (a settings dataclass) with fields set from command-line flags, which override the file.

    ``flags``: field name -> (flag as the user typed it, value or None for "not given"). Each value is
    checked as the file's value would be — finite, within the field's :func:`bounded` range — and a bad
    one is a UsageError (exit 2) naming the flag: ``--expect-rate 5000 must be at most 2400``."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    for name, (flag, value) in flags.items():
        if value is None:
            continue
        bounds = fields[name].metadata.get(_BOUNDS_KEY, DEFAULT_BOUNDS)
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(
                f"{flag} {value} is not a finite number",
                hint=f"give a plain number, e.g. {flag} 400",
            )
        why = bounds.check(value)
        if why:
            raise UsageError(
                f"{flag} {value:g} {why}",
                hint="see docs/configuration.md for the range of the setting it overrides",
            )
        changes[name] = value
    return dataclasses.replace(obj, **changes) if changes else obj


@dataclasses.dataclass(frozen=True)
class Config:
    source: Path | None
    raw: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    """Deprecation notes (old table and key names read as their new ones), for the command to print as warnings."""
    origins: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    """(table, key) read from an old name -> that old name (``[topo] expected_rate_gbps``), so an error
    names the key as the user wrote it."""

    def section(self, name: str, cls: type[C]) -> C:
        """Build ``cls`` (a dataclass with defaults) from table ``[name]``, checking keys and types."""
        if name not in SECTIONS:
            raise ValueError(f"unknown config section {name!r}")
        table = self.raw.get(name, {})
        moved = "; ".join(
            f"{key} is now [{new_table}] {new_key}"
            for (old_table, key), (new_table, new_key) in MOVED_KEYS.items()
            if old_table == name
        )
        written = {
            key: old for (table_name, key), old in self.origins.items() if table_name == name
        }
        return build_dataclass(
            cls, table, where=f"[{name}]", source=self.source, moved=moved, written=written
        )


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load ``path`` (or ``$IBDIAG_CONFIG`` when ``path`` is None); no file means built-in defaults."""
    if path is None:
        env = os.environ.get("IBDIAG_CONFIG")
        if not env:
            return Config(None, {})
        path = env
    p = Path(path)
    try:
        data = read_regular(p, MAX_CONFIG_BYTES)  # a device or FIFO is never opened
    except FileNotFoundError:
        raise InputError(
            f"config file {p}: no such file", hint="check --config or $IBDIAG_CONFIG"
        ) from None
    except RefusedFile as e:
        if p.is_dir():
            raise InputError(
                f"config file {p}: is a directory", hint="give the TOML file itself"
            ) from None
        if "allowed" not in e.problem:
            raise InputError(
                f"config file {p}: {e.problem}", hint="give the TOML file itself"
            ) from None
        raise InputError(
            f"config file {p}: more than {MAX_CONFIG_BYTES // 1024} KiB",
            hint="a config file is a few TOML tables; is this the right file?",
        ) from None
    except OSError as e:
        raise InputError(
            f"config file {p}: cannot read: {e.strerror}", hint="check the file's permissions"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"config file {p}: not UTF-8 text (byte {e.start}: '{safe_excerpt(data[e.start : e.start + 8])}')",
            hint="a config file is TOML text; is this the right file?",
        ) from None
    # Imported here: most runs have no config file, and the parser costs a few ms of start-up.
    if sys.version_info >= (3, 11):
        import tomllib  # novermin - guarded by the version check above
    else:  # Python 3.10 (Ubuntu 22.04): the same parser, as the tomli package
        import tomli as tomllib
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(
            f"config file {p}: not valid TOML: {safe_excerpt(e, 200)}",
            hint="see docs/configuration.md for an example",
        ) from None
    except ValueError as e:  # an integer past Python's 4300-digit limit
        raise InputError(
            f"config file {p}: {safe_excerpt(e, 200)}",
            hint="TOML integers are 64-bit; see docs/configuration.md for an example",
        ) from None
    except RecursionError:
        raise InputError(
            f"config file {p}: nested too deeply",
            hint=f"ibdiag's tables nest at most 3 levels ([counters.thresholds]); this file nests more than {MAX_NESTING}",
        ) from None
    _check_nesting(p, raw)
    unknown = sorted(set(raw) - set(SECTIONS) - set(MOVED_TABLES))
    if unknown:
        raise InputError(
            f"config file {p}: unknown table {', '.join('[' + safe_excerpt(u) + ']' for u in unknown[:8])}",
            hint=f"the tables are {', '.join('[' + s + ']' for s in SECTIONS)}",
        )
    for name in (*SECTIONS, *MOVED_TABLES):
        if name in raw and not isinstance(raw[name], dict):
            raise InputError(
                f"config file {p}: {name} must be a table ([{name}])",
                hint=f"write [{name}] on its own line, then key = value lines",
            )
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
    new: str | dict[str, Any]  # a table's name in this loop, the table itself in the next
    for old, new in MOVED_TABLES.items():
        if old not in tables:
            continue
        if new in tables:
            raise InputError(
                f"{src}[{old}] and [{new}] are both set",
                hint=f"[{old}] is the old name of [{new}]: keep [{new}] only",
            )
        tables[new] = tables.pop(old)
        given.update(
            {(new, key): f"[{old}] {key}" for key in tables[new]}
        )  # errors name the key as written
        notes.append(f"{src}[{old}] is deprecated: it is read as [{new}]; rename the table")
    for (old_table, old_key), (new_table, new_key) in MOVED_KEYS.items():
        if old_key not in tables.get(old_table, {}):
            continue
        value = tables[old_table].pop(old_key)
        new = tables.setdefault(new_table, {})
        old_name, new_name = f"[{old_table}] {old_key}", f"[{new_table}] {new_key}"
        notes.append(
            f"{src}{old_name} is deprecated: it is read as {new_name}, which {old_table} and the other commands share"
        )
        first = given.get((new_table, new_key))
        if new_key not in new:
            new[new_key] = value
        elif first is None:
            raise InputError(
                f"{src}{old_name} and {new_name} are both set",
                hint=f"{old_name} is the old name of {new_name}: keep {new_name} only",
            )
        elif isinstance(value, list) and isinstance(new[new_key], list):
            new[new_key] = new[new_key] + [v for v in value if v not in new[new_key]]
        elif value != new[new_key]:
            raise InputError(
                f"{src}{first} and {old_name} differ ({safe_value(new[new_key])} and {safe_value(value)})",
                hint=f"both are now {new_name}, one setting for every command: set it there once",
            )
        given[(new_table, new_key)] = old_name
    return Config(source, tables, tuple(notes), dict(given))


def _check_nesting(path: Path, raw: Mapping[str, Any]) -> None:
    """Refuse tables or lists nested deeper than :data:`MAX_NESTING` (iteratively: no recursion)."""
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_NESTING:
            raise InputError(
                f"config file {path}: {where.strip('.') or 'a value'} is nested more than {MAX_NESTING} levels deep",
                hint="ibdiag's tables nest at most 3 levels ([counters.thresholds])",
            )
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))


def _check_number(value: float, bounds: Bounds, where: str, src: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(
            f"{src}{where} = {safe_value(value)} is not a finite number",
            hint="write a plain number such as 400 or 0.5 (nan and inf are not allowed)",
        )
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise InputError(
            f"{src}{where} = {safe_value(value)} does not fit a 64-bit integer",
            hint="TOML integers are 64-bit; no threshold or count needs more",
        )
    why = bounds.check(value)
    if why:
        raise InputError(
            f"{src}{where} = {safe_value(value)} {why}",
            hint="see docs/configuration.md for each key's range",
        )


def _coerce(
    value: Any, tp: Any, where: str, source: Path | None, bounds: Bounds = DEFAULT_BOUNDS
) -> Any:
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
                return _coerce(value, arg, where, source, bounds)
            except InputError as e:
                errors.append(e)
        raise errors[0] if errors else InputError(f"{src}{where} has an invalid value")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise InputError(
            f"{src}{where} must be true or false, not {safe_value(value)}",
            hint="write true or false without quotes",
        )
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            _check_number(value, bounds, where, src)
            return value
        raise InputError(
            f"{src}{where} must be a whole number, not {safe_value(value)}",
            hint="write a number without quotes",
        )
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_number(value, bounds, where, src)
            return float(value)
        raise InputError(
            f"{src}{where} must be a number, not {safe_value(value)}",
            hint="write a number without quotes",
        )
    if tp is str:
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS or not value.isprintable():
                raise InputError(
                    f"{src}{where} = {safe_value(value)} is not a plain one-line string of at most {MAX_STRING_CHARS} characters",
                    hint="write the value in double quotes, without control characters",
                )
            return value
        raise InputError(
            f"{src}{where} must be a string, not {safe_value(value)}",
            hint="write the value in double quotes",
        )
    if origin is tuple:
        if not isinstance(value, list):
            raise InputError(
                f"{src}{where} must be a list, not {safe_value(value)}",
                hint="write a list like [1, 2]",
            )
        if len(value) > MAX_LIST_ITEMS:
            raise InputError(
                f"{src}{where} has {len(value)} items, more than {MAX_LIST_ITEMS}",
                hint="a config list names a few adapters or counters",
            )
        elem = args[0] if args else Any
        return tuple(_coerce(v, elem, f"{where}[{i}]", source, bounds) for i, v in enumerate(value))
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict,):
        if not isinstance(value, dict):
            raise InputError(
                f"{src}{where} must be a table, not {safe_value(value)}",
                hint="write it as a [section.key] table",
            )
        vt = args[1] if len(args) == 2 else Any
        return {
            str(k): _coerce(v, vt, f"{where}.{safe_excerpt(k)}", source, bounds)
            for k, v in value.items()
        }
    if tp is Any:
        return value
    raise TypeError(f"unsupported config field type {tp!r}")


def build_dataclass(
    cls: type[C],
    table: Mapping[str, Any],
    *,
    where: str,
    source: Path | None = None,
    moved: str = "",
    written: Mapping[str, str] | None = None,
) -> C:
    """``cls(**table)`` with type checks; mapping fields merge over their defaults (partial overrides).
    ``moved`` names keys that moved elsewhere, for the hint on an unknown key; ``written`` maps a key
    read from its old name to that name, which its errors then use."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get(_NOT_IN_FILE_KEY)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        src = f"config file {source}: " if source else "config: "
        raise InputError(
            f"{src}{where} has unknown key{'s' if len(unknown) > 1 else ''} {', '.join(safe_excerpt(u) for u in unknown[:8])}",
            hint=f"the keys of {where} are: {', '.join(sorted(fields))}"
            + (f"; {moved}" if moved else ""),
        )
    kwargs: dict[str, Any] = {}
    for name, value in table.items():
        tp = hints[name]
        bounds = fields[name].metadata.get(_BOUNDS_KEY, DEFAULT_BOUNDS)
        coerced = _coerce(value, tp, (written or {}).get(name, f"{where} {name}"), source, bounds)
        if isinstance(coerced, dict):
            f = fields[name]
            default = (
                f.default_factory()
                if f.default_factory is not dataclasses.MISSING
                else (f.default if f.default is not dataclasses.MISSING else {})
            )
            if isinstance(default, Mapping):
                unknown_keys = sorted(set(coerced) - set(default)) if default else []
                if unknown_keys:
                    src = f"config file {source}: " if source else "config: "
                    raise InputError(
                        f"{src}{where} {name} has unknown key{'s' if len(unknown_keys) > 1 else ''} {', '.join(safe_excerpt(u) for u in unknown_keys[:8])}",
                        hint=f"the keys of {where} {name} are: {', '.join(sorted(default))}",
                    )
                coerced = {**default, **coerced}
        kwargs[name] = coerced
    return cls(**kwargs)
