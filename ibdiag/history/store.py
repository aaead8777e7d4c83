"""The port history store: one JSON file per record in a directory the user named (``--history DIR``).

Format: ``DIR/<epoch ms, 15 digits>-<pid>-<counters|topo>.json``, each one ``ibdiag.history/1``
document (:class:`~ibdiag.history.model.Record`). Names sort in time order, so a window is read
without opening older files.

* **Crash-safe**: each record is written by :func:`ibdiag.outfile.write_atomically` (a temporary
  file, fsync, rename): a reader sees a whole record or none. A temporary file a SIGKILL left behind
  (``.NAME.PID.tmp``) is never read and is deleted by the next run's pruning after an hour.
* **Concurrent runs** (cron and a health check at once) write different names (the pid is in it) and
  never rewrite a file, so no lock is needed; pruning tolerates a file another run already deleted.
* **Bounded**: after each write, records older than ``retention_days`` are deleted, then the oldest
  until the store is under ``max_bytes``. Only files whose names this module writes are ever deleted.
* **Untrusted on read**: each file is read with a size cap and checked through
  :mod:`ibdiag.jsonread`; a malformed one, or one from another host, is skipped and counted.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ibdiag.counters.model import PortCounters
from ibdiag.counters.spec import max_value, width_bits
from ibdiag.errors import CannotRunError, UsageError
from ibdiag.history.config import HistoryConfig
from ibdiag.history.model import SCHEMA, Record
from ibdiag.jsonread import MAX_TEXT, Fields, JsonFieldError, check_integer, check_text, loads
from ibdiag.node.aer import AER_FILES, MAX_COUNT, AerCounts
from ibdiag.node.model import Port
from ibdiag.outfile import write_atomically
from ibdiag.parse import MAX_IB_RATE_GBPS
from ibdiag.text import safe_excerpt

_NAME_RE = re.compile(r"^(\d{15})-(\d{1,10})-(counters|topo)\.json$")
_TMP_RE = re.compile(r"^\.(\d{15})-(\d{1,10})-(counters|topo)\.json\.\d+\.tmp$")
#: Largest record read (a node with 32 ports writes about 100 KiB).
MAX_RECORD_BYTES = 4 * 2**20
#: A temporary file older than this is what a killed run left behind.
STALE_TMP_S = 3600.0
_PORTS_MAX = 4096
#: Deepest nesting a record has (record > ports > port > counters > value): 4 levels; 8 allowed.
_RECORD_DEPTH = 8


@dataclass(frozen=True)
class Loaded:
    """What reading the store found."""

    records: tuple[Record, ...]
    """Oldest first."""
    skipped: tuple[str, ...] = ()
    """``NAME: why`` for each record that could not be used."""


def check_store(directory: Path) -> Path:
    """The store directory, created if missing (only the directory named); refused before the run if
    it is not a writable directory."""
    d = Path(directory)
    try:
        d.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"--history {d}: cannot create the directory: {e.strerror}",
            hint="give a directory you can write, e.g. --history /var/lib/ibdiag/history",
        ) from None
    if not d.is_dir():
        raise UsageError(
            f"--history {d}: not a directory", hint="give a directory for the port history"
        )
    if not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(
            f"--history {d}: not writable",
            hint="run as the user that owns it, or give another directory",
        )
    return d


def record_name(rec: Record, pid: int | None = None) -> str:
    return (
        f"{int(rec.taken_at_s * 1000):015d}-{os.getpid() if pid is None else pid}-{rec.source}.json"
    )


def write_record(directory: Path, rec: Record, cfg: HistoryConfig) -> Path:
    """Write ``rec`` into the store, then prune it; the file written."""
    path = Path(directory) / record_name(rec)
    data = json.dumps(rec.to_json(), separators=(",", ":"), allow_nan=False) + "\n"
    write_atomically(path, data, option="--history")
    prune(Path(directory), cfg, now=rec.taken_at_s)
    return path


def _entries(directory: Path) -> list[tuple[str, int, int]]:
    """(name, ms, size) of the store's record files, oldest first."""
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise CannotRunError(
            f"--history {directory}: cannot list: {e.strerror}", hint="check the directory"
        ) from None
    out = []
    for name in names:
        m = _NAME_RE.match(name)
        if not m:
            continue
        try:
            st = os.lstat(directory / name)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append((name, int(m.group(1)), st.st_size))
    return sorted(out, key=lambda e: (e[1], e[0]))


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass  # another run pruned it first


def prune(directory: Path, cfg: HistoryConfig, *, now: float) -> int:
    """Delete records past retention, then the oldest until under ``max_bytes``; the number deleted."""
    entries = _entries(directory)
    cutoff_ms = (now - cfg.retention_days * 86400.0) * 1000
    deleted = 0
    keep = []
    for name, ms, size in entries:
        if ms < cutoff_ms:
            _unlink(directory / name)
            deleted += 1
        else:
            keep.append((name, size))
    total = sum(size for _, size in keep)
    for name, size in keep[:-1]:  # the newest record always stays
        if total <= cfg.max_bytes:
            break
        _unlink(directory / name)
        total -= size
        deleted += 1
    for name in os.listdir(directory):
        if _TMP_RE.match(name):
            try:
                st = os.lstat(directory / name)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mtime < now - STALE_TMP_S:
                _unlink(directory / name)
    return deleted


def _read_record(path: Path) -> bytes:
    """A record file's bytes: never through a link, never a device or FIFO, never more than the cap."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"more than {MAX_RECORD_BYTES} bytes")
    return data


def read_records(directory: Path, *, host: str, since_s: float) -> Loaded:
    """Records from ``since_s`` on, plus the newest one before it (the baseline of the first step)."""
    d = Path(directory)
    if not d.is_dir():
        return Loaded(())
    entries = _entries(d)
    first = 0
    for i, (_name, ms, _size) in enumerate(entries):
        if ms >= since_s * 1000:
            first = max(0, i - 1)
            break
    else:
        first = max(0, len(entries) - 1)
    records: list[Record] = []
    skipped: list[str] = []
    for name, _ms, size in entries[first:]:
        why = None
        if size > MAX_RECORD_BYTES:
            why = f"{size} bytes, more than {MAX_RECORD_BYTES}"
        else:
            try:
                # jsonread's budget: "[" * 100000 is a skipped record, not a RecursionError
                rec = parse_record(loads(_read_record(d / name), max_depth=_RECORD_DEPTH))
            except FileNotFoundError:
                continue  # pruned by a concurrent run
            except (OSError, ValueError) as e:  # JsonFieldError is a ValueError
                why = safe_excerpt(str(e), 200)
            else:
                if rec.host != host:
                    why = f"recorded on host {rec.host}, this is {host}"
                else:
                    records.append(rec)
        if why:
            skipped.append(f"{name}: {why}")
    records.sort(key=lambda r: r.taken_at_s)
    return Loaded(tuple(records), tuple(skipped))


def _counter_map(f: Fields, key: str, bits: int, hw: bool) -> dict[str, int | None] | None:
    sub = f.object(key)
    if sub is None:
        return None
    out: dict[str, int | None] = {}
    for name, value in sub.doc.items():
        check_text(name, f"{sub.where} key", max_len=256)
        width = 64 if hw else (width_bits(name, data_bits=bits) or 64)
        out[name] = (
            None
            if value is None
            else check_integer(value, f"{sub.where}.{name}", 0, max_value(width))
        )
    return out


def _port(f: Fields) -> PortCounters:
    adapter = f.text("adapter", required=True)
    port = f.integer("port", 0, 2**32 - 1, required=True)
    bits = f.integer("data_counter_bits", 32, 64) or 64
    if bits not in (32, 64):
        raise JsonFieldError(f"{f.where}.data_counter_bits", "must be 32 or 64")
    rate = f.number("rate_gbps", 0, MAX_IB_RATE_GBPS)
    info = Port(
        adapter=adapter,
        port=port,
        state=f.text("state"),
        state_code=None,
        phys_state=f.text("phys_state"),
        phys_state_code=None,
        rate_gbps=rate,
        lanes=None,
        lane_speed=None,
        link_layer=f.text("link_layer"),
        lid=None,
        sm_lid=None,
        netdev=None,
    )
    return PortCounters(
        adapter=adapter,
        port=port,
        info=info,
        counters=_counter_map(f, "counters", bits, hw=False),
        hw_counters=_counter_map(f, "hw_counters", bits, hw=True),
        saturated=frozenset(f.texts("saturated", max_items=256)),
        data_bits=bits,
    )


def _aer_kind(f: Fields, key: str) -> dict[str, int] | None:
    sub = f.object(key)
    if sub is None:
        return None
    return {
        check_text(k, f"{sub.where} key", max_len=64): check_integer(
            v, f"{sub.where}.{k}", 0, MAX_COUNT
        )
        for k, v in sub.doc.items()
    }


def _aer(f: Fields) -> AerCounts:
    device = f.text("device", required=True)
    kinds = {kind: _aer_kind(f, kind) for kind in AER_FILES}
    return AerCounts(device, kinds["correctable"], kinds["nonfatal"], kinds["fatal"])


def parse_record(doc: object) -> Record:
    """A record from its JSON, every value checked; :class:`JsonFieldError` names the bad one."""
    f = Fields(doc, "record")
    f.text("schema", choices=(SCHEMA,), required=True)
    host = f.text("host", required=True)
    if len(host) > MAX_TEXT:
        raise JsonFieldError("record.host", "too long")
    return Record(
        taken_at_s=f.number("taken_at_epoch_s", 1.0, 2**40, required=True),
        host=host,
        source=f.text("source", choices=("counters", "topo"), required=True),
        ports=f.objects("ports", _port, max_items=_PORTS_MAX),
        aer=f.objects("aer", _aer, max_items=_PORTS_MAX),
    )


def newest(records: Sequence[Record]) -> Record | None:
    return records[-1] if records else None
