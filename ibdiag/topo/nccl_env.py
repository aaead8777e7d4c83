"""The NCCL settings a job runs with: ``NCCL_*`` of an environment, an env file, or a job's ``-x`` list.

Pure parsers: the CLI hands in the environment it was given (``main(argv, env)``) or the text of
``--nccl-env FILE``. A file holds ``KEY=VALUE`` lines (``export`` allowed, ``#`` comments, shell
quotes) or an ``mpirun``/``srun`` command line with ``-x KEY=VALUE`` options (``-x KEY`` alone names
a variable taken from the launcher's environment: its value is not in the file, so it is left out).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import InputError
from ibdiag.infile import read_text_file
from ibdiag.text import is_printable, safe_value

#: Most variables kept; a longer list is not a job's environment.
MAX_VARIABLES = 512
#: Longest value kept (NCCL_IB_HCA with 32 entries is well under it).
MAX_VALUE = 4096


@dataclass(frozen=True)
class NcclEnv:
    """``NCCL_*`` variables (name -> value, in the order given) and where they came from."""

    variables: tuple[tuple[str, str], ...]
    source: str
    """``environment`` or the file's name."""

    def get(self, name: str) -> str | None:
        for k, v in self.variables:
            if k == name:
                return v
        return None

    def __bool__(self) -> bool:
        return bool(self.variables)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "variables": dict(self.variables)}


def _keep(pairs: list[tuple[str, str]], source: str) -> NcclEnv:
    seen: dict[str, str] = {}
    for k, v in pairs:
        if k.startswith("NCCL_") and is_printable(v) and len(v) <= MAX_VALUE:
            seen[k] = v  # the last setting wins, as in a shell
    if len(seen) > MAX_VARIABLES:
        raise InputError(
            f"{source}: {len(seen)} NCCL_* variables, more than {MAX_VARIABLES}",
            hint="give the job's environment (env | grep ^NCCL_ > FILE)",
        )
    return NcclEnv(tuple(seen.items()), source)


def from_environ(environ: Mapping[str, str]) -> NcclEnv:
    """The ``NCCL_*`` variables of an environment."""
    return _keep(list(environ.items()), "environment")


def _assignment(token: str, where: str) -> tuple[str, str]:
    key, eq, value = token.partition("=")
    if not eq or not key or not (key[0].isalpha() or key[0] == "_"):
        raise InputError(
            f"{where}: expected KEY=VALUE, got {safe_value(token)}",
            hint="an env file holds KEY=VALUE lines (env | grep ^NCCL_), or a command line with -x KEY=VALUE",
        )
    return key, value


def _command_line(text: str, source: str) -> list[tuple[str, str]] | None:
    """The ``-x KEY=VALUE`` (``--env``) pairs of a launcher's command line; None when it has no ``-x``."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError:
        return None
    if not any(t in ("-x", "--env") for t in tokens):
        return None
    return [
        _assignment(tokens[i + 1], source)
        for i, tok in enumerate(tokens[:-1])
        if tok in ("-x", "--env") and "=" in tokens[i + 1]
    ]


def parse_env_text(text: str, source: str) -> NcclEnv:
    """``KEY=VALUE`` lines, or a command line with ``-x KEY=VALUE`` options (``\\`` continuations too)."""
    from_cli = _command_line(text, source)
    if from_cli is not None:
        return _keep(from_cli, source)
    pairs: list[tuple[str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{n}"
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as e:
            raise InputError(f"{where}: {e}", hint="check the quotes on this line") from None
        if tokens and tokens[0] == "export":
            tokens = tokens[1:]
        pairs += [_assignment(tok, where) for tok in tokens]
    return _keep(pairs, source)


#: Largest env file read: a job's environment or command line is a few KiB.
MAX_FILE_BYTES = 2**20


def read_env_file(path: str) -> NcclEnv:
    """``--nccl-env FILE``: read and parse; a missing, unreadable, oversized or binary file is InputError."""
    hint = "give a file of KEY=VALUE lines (env | grep ^NCCL_ > FILE) or the job's launcher line with -x KEY=VALUE"
    text = read_text_file(path, MAX_FILE_BYTES, f"--nccl-env {safe_value(path)}", hint)
    return parse_env_text(text, path)
