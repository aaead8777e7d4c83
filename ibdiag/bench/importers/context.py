"""What surrounds a benchmark's table: the command line that ran it and NCCL's own debug lines.

Pure functions of lines. :class:`Context` is fed every line of a log before the table readers see
it; it keeps

* command lines (:func:`command_line`): a shell prompt (``root@node1:~# ``, ``$ ``, ``+ `` of
  ``bash -x``) or a script's ``running: `` followed by a launcher (``mpirun``/``mpiexec``/``srun``), a
  wrapper (``sudo``, ``env``, ``numactl`` ...), ``VAR=value`` words or the benchmark binary itself
  (``*_perf``, ``ib_*_bw``/``ib_*_lat``). The launcher's rank/node options and the binary's own options
  are read into a :class:`~ibdiag.bench.results.provenance.CommandLine`;
* ``NCCL INFO``/``WARN`` lines (``NCCL_DEBUG=INFO``): the NCCL version, the network and its devices,
  GPUDirect RDMA, SHARP/CollNet/NVLS, ring/tree, channel counts (a
  :class:`~ibdiag.bench.results.provenance.NcclPath`, read by :mod:`~ibdiag.bench.importers.transport`),
  the warning lines, and the hosts named in their ``host:pid:tid [dev]`` prefixes. A table row that ran
  into an NCCL line (stdout and stderr sharing a terminal) is handed on without it;
* environment lines (``export NCCL_IB_DISABLE=1``, ``NCCL_NET=Socket`` printed by ``env``): NCCL's
  variables, a signal of the transport like the command line's ``-x VAR=value``;
* the CQE the verbs provider dumps when a completion fails (``mlx5: gpu5: got completion with error:``
  and four lines of four hex words, rdma-core providers/mlx5/cq.c): read as a completion error
  (syndrome and vendor syndrome), never as table rows.

Facts: NCCL's ``init.cc``/``transport/net_ib.cc``/``net_socket.cc`` log lines (``NET/IB : Using
[0]mlx5_0:1/IB ; OOB ib0:...``, ``Using network IB``, ``Channel 00/0 : 0[0] -> 1[1] [send] via
NET/IB/0/GDRDMA``, ``32 coll channels, 0 collnet channels, 0 nvls channels``, ``comm ... nNodes 2``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator

from ibdiag import hostlists
from ibdiag.bench.importers.lines import Line, iter_lines
from ibdiag.bench.importers.transport import PathFacts, nccl_path, prefix_host
from ibdiag.bench.results.provenance import (
    MAX_NAMES,
    MAX_WARNINGS,
    NCCL_TESTS_OPTIONS,
    PERFTEST_FLAGS,
    PERFTEST_OPTIONS,
    CommandLine,
    CompletionError,
    NcclPath,
)
from ibdiag.hostlists import HostListError
from ibdiag.jsonread import Scalar

NCCL_DEBUG = re.compile(r"\bNCCL (INFO|WARN|TRACE|ERROR|ABORT)\b")
_NCCL_VERSION = re.compile(r"\bNCCL version (\S+)")
_BINARY = re.compile(
    r"^(?:[a-z0-9]+(?:_[a-z0-9]+)*_perf(?:_mpi)?|ib_(?:write|read|send|atomic)_(?:bw|lat))$"
)
_PROMPT = re.compile(r"^(?:\([\w.-]+\)\s+)?(?:[\w.-]+@[\w.-]+(?::[^\s$#%]*)?\s*[$#%]|[$#%>+])\s+")
_LAUNCHERS = {
    "mpirun": "mpirun",
    "mpiexec": "mpirun",
    "mpiexec.hydra": "mpirun",
    "orterun": "mpirun",
    "prterun": "mpirun",
    "srun": "srun",
}
_WRAPPERS = frozenset(
    {
        "sudo",
        "env",
        "time",
        "numactl",
        "taskset",
        "timeout",
        "nohup",
        "exec",
        "stdbuf",
        "nice",
        "chrt",
        "ionice",
    }
)
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SIZE = re.compile(r"^(\d+(?:\.\d*)?)\s*([kKmMgG]?)$")
_INT_OPTIONS = frozenset(
    {
        "step_factor",
        "gpus_per_thread",
        "threads",
        "iters",
        "warmup_iters",
        "check",
        "blocking",
        "cuda_graph",
        "cycles",
        "per_iter_timing",
        "gid_index",
        "qps",
        "duration_s",
        "post_list",
    }
)
_SIZE_OPTIONS = frozenset({"min_bytes", "max_bytes", "size"})
MAX_COMMAND = 500


def binary_name(token: str) -> str | None:
    """``./build/all_reduce_perf`` -> ``all_reduce_perf``; None when the token is not a benchmark binary."""
    base = token.rsplit("/", 1)[-1]
    return base if _BINARY.match(base) else None


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def _start(words: list[str], *, anywhere: bool) -> int | None:
    """Where a command starts in ``words``: the first launcher, wrapper, VAR=value or binary word at
    the start or (``anywhere``) after a word ending in ``:`` (``running: mpirun ...``)."""
    for j, w in enumerate(words):
        if j > 0 and not (anywhere and words[j - 1].endswith(":")):
            continue
        base = w.rsplit("/", 1)[-1]
        if base in _LAUNCHERS or base in _WRAPPERS or _ENV_WORD.match(w) or binary_name(w):
            return j
    return None


def _size(value: str) -> int | None:
    """nccl-tests' sizes: a number with K/M/G (binary) or plain bytes."""
    m = _SIZE.match(value.strip())
    if not m:
        return None
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2).lower()]
    v = float(m.group(1)) * scale
    return int(v) if v < 2**62 else None


def _option_value(name: str, value: str) -> Scalar:
    if name in _SIZE_OPTIONS:
        v = _size(value)
        return v if v is not None else value[:100]
    if name in _INT_OPTIONS:
        try:
            return int(value, 0)
        except ValueError:
            return value[:100]
    return value[:100]


def _binary_options(binary: str, words: list[str]) -> dict[str, Scalar]:
    table = PERFTEST_OPTIONS if binary.startswith("ib_") else NCCL_TESTS_OPTIONS
    flags = PERFTEST_FLAGS if binary.startswith("ib_") else frozenset()
    out: dict[str, Scalar] = {}
    i = 0
    while i < len(words):
        w = words[i]
        key, attached = w, None
        if w.startswith("--") and "=" in w:
            key, attached = w.split("=", 1)
        elif len(w) > 2 and w[0] == "-" and w[1] != "-" and w[:2] in table and w[:2] not in flags:
            key, attached = w[:2], w[2:]  # getopt's -b8
        name = table.get(key)
        if name is None:
            i += 1
            continue
        if key in flags:
            out[name] = True
            i += 1
            continue
        if attached is None:
            if i + 1 >= len(words):
                break
            attached = words[i + 1]
            i += 1
        out[name] = _option_value(name, attached)
        i += 1
    return out


def _int(value: str) -> int | None:
    try:
        v = int(value)
    except ValueError:
        return None
    return v if 0 < v < 1 << 24 else None


def _hosts(value: str) -> list[str]:
    return [h.split(":", 1)[0] for h in value.split(",") if h.split(":", 1)[0]]


def node_list(value: str) -> tuple[list[str], int]:
    """Slurm's node list: ``node[01-03,07],gpu5`` -> (node01, node02, node03, node07, gpu5; 5), by
    :mod:`ibdiag.hostlists`. A list of more than MAX_NAMES hosts is only counted (no names); a
    malformed one names none and counts 0."""
    try:
        n = hostlists.count(value)
        return (hostlists.expand(value) if n <= MAX_NAMES else []), n
    except HostListError:
        return [], 0


def command_line(text: str) -> CommandLine | None:
    """The command in one line of a log, or None when the line is not a command running a benchmark."""
    s = text.strip()
    m = _PROMPT.match(s)
    if m:
        s = s[m.end() :]
    words = _words(s)
    # after a bare '#' (a root prompt, or one of nccl-tests' comment lines) the command must come first
    j = _start(words, anywhere=not (m and m.group(0).strip() == "#"))
    if j is None:
        return None
    words = words[j:]
    b = next((i for i, w in enumerate(words) if binary_name(w)), None)
    if b is None:
        return None
    binary = binary_name(words[b])
    assert binary is not None
    launcher, ranks, nodes, per_node = None, None, None, None
    hosts: list[str] = []
    env: dict[str, str] = {}
    pre = words[:b]
    i = 0
    while i < len(pre):
        w = pre[i]
        nxt = pre[i + 1] if i + 1 < len(pre) else ""
        opt, eq = (w.split("=", 1) + [""])[:2] if w.startswith("--") and "=" in w else (w, None)
        val = eq if eq is not None else nxt
        took = eq is None
        base = w.rsplit("/", 1)[-1]
        if launcher is None and base in _LAUNCHERS:
            launcher = _LAUNCHERS[base]
            took = False
        elif _ENV_WORD.match(w) and (launcher is None or pre[i - 1] != "-x"):
            k, v = w.split("=", 1)
            env[k[:100]] = v[:200]
            took = False
        elif launcher == "mpirun" and opt in ("-np", "-n", "--np", "-c"):
            ranks = _int(val)
        elif launcher == "mpirun" and opt in ("-H", "--host", "-host", "-hosts", "--hosts"):
            hosts += _hosts(val)
        elif launcher == "mpirun" and opt == "-x":
            k, _, v = val.partition("=")
            env[k[:100]] = v[:200]
        elif launcher == "mpirun" and opt in ("-npernode", "--npernode", "-N", "-ppn", "--ppn"):
            per_node = _int(val)
        elif (
            launcher == "mpirun"
            and opt in ("--map-by", "-map-by")
            and val.startswith("ppr:")
            and val.endswith(":node")
        ):
            per_node = _int(val.split(":")[1])
        elif launcher == "srun" and opt in ("-N", "--nodes"):
            nodes = _int(val.split("-")[0])
        elif launcher == "srun" and opt in ("-n", "--ntasks"):
            ranks = _int(val)
        elif launcher == "srun" and opt == "--ntasks-per-node":
            per_node = _int(val)
        elif launcher == "srun" and opt in ("-w", "--nodelist"):
            names, listed = node_list(val)
            hosts += names
            nodes = nodes if nodes is not None or names else listed or None
        else:
            took = False
        i += 2 if took else 1
    hosts = list(dict.fromkeys(hosts))[:MAX_NAMES]
    if nodes is None and hosts:
        nodes = len(hosts)
    return CommandLine(
        text=" ".join(words)[:MAX_COMMAND],
        binary=binary,
        launcher=launcher,
        ranks=ranks,
        nodes=nodes,
        tasks_per_node=per_node,
        hosts=tuple(hosts),
        env=dict(list(env.items())[:MAX_NAMES]),
        options=_binary_options(binary, words[b + 1 :]),
    )


_CQE_HEAD = re.compile(r"mlx5: (?P<host>[^\s:]{1,255}): got completion with error:?\s{0,8}$")
_CQE_WORDS = re.compile(r"[0-9a-f]{8}(?: [0-9a-f]{8}){3}\s{0,8}$")
#: mlx5 CQE syndrome -> ibv_wc_status (rdma-core providers/mlx5/cq.c mlx5_handle_error_cqe).
_CQE_STATUS = {
    0x01: 1, 0x02: 2, 0x04: 4, 0x05: 5, 0x06: 6, 0x10: 7, 0x11: 8,
    0x12: 9, 0x13: 10, 0x14: 11, 0x15: 12, 0x16: 13, 0x22: 16,
}  # fmt: skip


_ENV_LINE = re.compile(
    r"^(?:export\s+|setenv\s+|declare -x\s+)?(NCCL_[A-Z0-9_]+)(?:=|\s+)(\"[^\"]*\"|'[^']*'|\S+)\s*$"
)


class Context:
    """Fed every line of a log; keeps its command lines and NCCL lines (see the module docstring)."""

    def __init__(self) -> None:
        self.commands: list[tuple[int, CommandLine]] = []
        self.nccl_version: str | None = None
        self.warnings: list[tuple[int, str]] = []
        self.warning_count = 0
        self.facts = PathFacts()
        self.env: dict[str, tuple[str, str]] = {}
        """NCCL variables set in environment lines of the log (``export NCCL_IB_DISABLE=1``): value, where."""
        self.fragment: Line | None = None
        self.skipped = 0
        self._cqe: tuple[str, int, int] | None = None
        """A CQE dump being read: (host, its first line, dump lines still to come)."""

    def table_lines(self, raw_lines: Iterable[str]) -> Iterator[Line]:
        """Every line (see :func:`iter_lines`) that :meth:`feed` does not take, lazily; of an NCCL line
        that a table row ran into (stdout and stderr sharing a terminal), the row's part."""
        for ln in iter_lines(raw_lines):
            if not self.feed(ln):
                yield ln
            elif self.fragment is not None:
                yield self.fragment
                self.fragment = None

    def _fragment(self, prefix: str, line: Line) -> None:
        """Keep what stands before an NCCL line's ``host:pid:tid [dev]`` prefix when it starts like a row."""
        m = prefix_host(prefix)
        head = (prefix[: m.start()] if m else prefix).strip()
        words = head.split()
        if m and len(words) >= 2 and words[0].isdigit() and words[1].isdigit():
            self.fragment = Line(line.number, head, line.tag, line.truncated)

    def feed(self, line: Line) -> bool:
        """True when the line is a command line, an NCCL debug line or a CQE dump (not part of any table)."""
        s = line.text.strip()
        if not s or line.truncated:
            return False
        if self._cqe_line(s, line.number):
            return True
        dbg = NCCL_DEBUG.search(s) if "NCCL " in s else None
        if dbg:
            prefix = s[: dbg.start()]
            self._nccl(dbg.group(1), prefix, s[dbg.end() :], line.number)
            self._fragment(prefix, line)
            return True
        if "NCCL_" in s[:40]:
            p = _PROMPT.match(s)
            m = _ENV_LINE.match(s[p.end() :] if p else s)
            if m and len(self.env) < MAX_NAMES:
                value = m.group(2).strip("'\"")[:200]
                self.env[m.group(1)[:100]] = (value, f"line {line.number}: {m.group(1)}={value}")
                return True
        if s.startswith("NCCL version"):
            m = _NCCL_VERSION.search(s)
            if m:
                self.nccl_version = m.group(1)[:100]
            return True
        if len(self.commands) < 64 and ("_perf" in s or "ib_" in s):
            cmd = command_line(s)
            if cmd is not None:
                self.commands.append((line.number, cmd))
                return True
        return False

    def _cqe_line(self, s: str, number: int) -> bool:
        """The provider's ``got completion with error:`` line and the four lines of the CQE after it;
        the last line's second word holds the vendor syndrome and the syndrome (mlx5_err_cqe)."""
        if self._cqe is not None:
            host, first, left = self._cqe
            if _CQE_WORDS.match(s):
                self._cqe = (host, first, left - 1) if left > 1 else None
                if left == 1:
                    word = s.split()[1]
                    vendor, synd = int(word[4:6], 16), int(word[6:8], 16)
                    status = _CQE_STATUS.get(synd, 21)
                    self.facts.completion(
                        CompletionError(status, vendor, host, where=f"line {first}, CQE dump")
                    )
                return True
            self._cqe = None
        if s.startswith("mlx5: ") and "got completion" in s:
            m = _CQE_HEAD.match(s)
            if m:
                self._cqe = (m.group("host")[:80], number, 4)
                return True
        return False

    def _nccl(self, kind: str, prefix: str, body: str, number: int) -> None:
        self.facts.host(prefix)
        where = f"line {number}"
        if kind in ("WARN", "ERROR", "ABORT"):
            self.warning_count += 1
            if len(self.warnings) < MAX_WARNINGS:
                self.warnings.append((number, f"NCCL {kind}{body}"[:300]))
            self.facts.warn(body, where, prefix)
            return
        if kind != "INFO":
            return
        if "NCCL version" in body:
            m = _NCCL_VERSION.search(body)
            if m:
                self.nccl_version = m.group(1)[:100]
        self.facts.info(body, where)

    def command_for(self, start_line: int) -> CommandLine | None:
        """The last command line before ``start_line``, else the first one in the log."""
        before = [c for n, c in self.commands if n < start_line]
        if before:
            return before[-1]
        return self.commands[0][1] if self.commands else None

    def nccl_path(self, command: CommandLine | None = None) -> NcclPath | None:
        """What every signal says about the path (:func:`~ibdiag.bench.importers.transport.nccl_path`),
        for the run launched by ``command``."""
        return nccl_path(self.facts, command, self.env)
