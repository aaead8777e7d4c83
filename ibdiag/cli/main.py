"""The one boundary between the process and ibdiag: ``main(argv, env) -> ExitStatus``.

Everything that touches the process is here: the streams, the environment, ``sys.exit``. Commands
get an :class:`~ibdiag.cli.env.Environment` (through :func:`ibdiag.cli.env.current`), hand their
report and views to :func:`ibdiag.cli.common.emit`, and return an exit status; errors of every kind go
through :func:`ibdiag.cli.errors.write_error`. At the end this module applies what the run asked
for beyond its output: ``--textfile`` (written on every way out) and ``--exit-codes nagios``.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ibdiag.cli.env import Environment, Session, bound
from ibdiag.errors import ExitStatus


def _prescan(argv: Sequence[str], session: Session) -> None:
    """What the options ask of the boundary, read before click parses (a usage error must still be
    answered as ``-o line``, still write ``--textfile``). The command's parsed options refine it."""
    words = list(argv)
    for i, word in enumerate(words):
        if word == "--":
            break
        nxt = words[i + 1] if i + 1 < len(words) else ""
        fmt = None
        if word in ("-o", "--format"):
            fmt = nxt.lower()
        elif word.startswith("--format=") or (
            word.startswith("-o") and not word.startswith("--") and len(word) > 2
        ):
            fmt = word.split("=", 1)[-1].removeprefix("-o").lower()
        if fmt is not None:
            session.line, session.junit = fmt == "line", fmt == "junit"
        elif word == "--exit-codes":
            session.nagios = nxt.lower() == "nagios"
        elif word.startswith("--exit-codes="):
            session.nagios = word.split("=", 1)[1].lower() == "nagios"
        elif word == "--textfile" and nxt:
            session.textfile = Path(nxt)
        elif word.startswith("--textfile="):
            session.textfile = Path(word.split("=", 1)[1])
        elif word == "--debug":
            session.debug = True
    commands = [w for w in words if not w.startswith("-")]
    if commands and session.command is None:
        session.command = commands[0]


@contextmanager
def _process_streams(env: Environment) -> Iterator[None]:
    """Point the process's own streams at the environment's while the run lasts: click writes
    ``--help`` with its own ``echo``, a library may still read ``sys.stdin``. A no-op for the console
    script (the environment *is* the process's)."""
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = env.stdin, env.stdout, env.stderr
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> ExitStatus:
    """Run ``ibdiag ARGV`` in ``env`` (default: this process) and return its exit status."""
    # lazy: typer, click and the app load here, after run() paused the collector for start-up (issue 15)
    from typer.main import get_command

    from ibdiag.cli import app  # lazy: as above
    from ibdiag.cli.errors import finish, write_error  # lazy: as above

    if env is None:
        env = Environment.from_process()
    args = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    session = Session(env, debug=env.debug)
    _prescan(args, session)
    with bound(session), _process_streams(env):
        try:
            status = get_command(app).main(args=args, prog_name="ibdiag", standalone_mode=False)
        except KeyboardInterrupt:
            status = write_error(session, "interrupted", None, ExitStatus.INTERRUPTED)
        status = finish(session, int(status if isinstance(status, int) else 0))
    try:
        return ExitStatus(status)
    except ValueError:  # a status outside the table (never expected): reported as could-not-run
        return ExitStatus.CANNOT_RUN


#: True while :func:`run` (ibdiag's own process) has the cyclic collector paused for start-up.
_starting = False
#: True in ibdiag's own process (:func:`run`), False where :func:`main` is called as a library.
_own_process = False
#: What :func:`keep_until_exit` keeps: a list that holds itself, so that nothing in it is freed when
#: the interpreter clears this module at exit (the collector, frozen by :func:`run` at the end, never
#: looks at it either).
_kept: list[object] = []
_kept.append(_kept)


def keep_until_exit(result: object) -> None:
    """In ibdiag's own process, keep a command's result until the process ends: it is never freed one
    object at a time (a 16k-GPU fabric's model and document are half a million objects; freeing
    them was 2-3 % of the Selene-size run, issue 39), the operating system takes the memory back at
    once. Anywhere else (a test or a library calling :func:`main`) it does nothing: the result is
    freed as usual."""
    if _own_process:
        _kept.append(result)


def command_starts() -> None:
    """Called as a command's body begins (:func:`ibdiag.cli.common.handle_errors`).

    In ibdiag's own process (:func:`run`) start-up leaves tens of thousands of objects (modules,
    classes, typer's and click's command objects) that live until the process exits: they are frozen
    out of the cyclic collector's sight (``gc.freeze``), so that neither the command's collections
    nor the one at exit walk them again, and the collector, paused during start-up, runs again for
    the command. Issue 15: this was about a tenth of ``ibdiag topo``'s whole process. Anywhere else
    (a test calling :func:`main`) it does nothing."""
    global _starting
    if _starting:
        _starting = False
        gc.freeze()
        gc.enable()


def run() -> None:
    """The ``ibdiag`` console script."""
    global _starting, _own_process
    _own_process = True
    _starting = gc.isenabled()
    gc.disable()  # start-up makes long-lived objects only: nothing for the collector to find
    try:
        status = main()
    finally:
        if _starting:  # no command ran (--help, a usage error)
            _starting = False
            gc.enable()
    # The run is over (output written and flushed, --textfile too): the collection at interpreter
    # exit would only walk what is left to be freed by the OS, typer's commands and the command's
    # model. Python never promised to collect cycles at exit (__del__ of objects alive then need not
    # run), and ibdiag closes every file it writes with `with` (benchmarks/topo_startup.py: --help and
    # topo each spend less without that walk).
    gc.freeze()
    sys.exit(int(status))
