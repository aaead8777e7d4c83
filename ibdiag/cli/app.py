"""The typer application, the group that gives every error the ``ibdiag: error:`` form, and the
lazy loading of the command modules."""

from __future__ import annotations

import importlib
from difflib import get_close_matches
from typing import Annotated, Any

import typer
from typer import (
    _click as click,  # typer vendors click; this is the same click its exceptions come from (typer pinned in pyproject)
)
from typer._completion_classes import completion_init
from typer.core import TyperGroup

from ibdiag import __version__
from ibdiag.cli.env import current
from ibdiag.cli.errors import write_error, write_to
from ibdiag.errors import EXIT_STATUS_TABLE, ExitStatus

#: Which module defines each command, per group, in the order ``--help`` lists them. A command's
#: module is imported (and its typer signature turned into a click command) only when the command
#: is asked for: ``ibdiag topo`` loads topo's module alone. Importing and converting all eight cost
#: about 40 ms of a 0.2 s start (issue 15; ``benchmarks/topo_startup.py``).
COMMANDS: dict[str, dict[str, str]] = {
    "ibdiag": {
        "topo": "ibdiag.cli.topo",
        "counters": "ibdiag.cli.counters",
        "fabric": "ibdiag.cli.fabric",
        "verdict": "ibdiag.cli.verdict",
        "snapshot": "ibdiag.cli.snapshot",
        "sweep": "ibdiag.cli.sweep",
        "report": "ibdiag.cli.report",
        "job": "ibdiag.cli.job",
    },
    "bench": {
        "serve": "ibdiag.cli.bench_serve",
        "p2p": "ibdiag.cli.bench_p2p",
        "collective": "ibdiag.cli.bench_collective",
        "import": "ibdiag.cli.bench_import",
    },
}

#: One-line summaries for `ibdiag --help` / `ibdiag bench --help` (listed without importing the
#: commands): short enough that click never cuts them with "..." at 80 columns (the docstring's
#: first sentence stays the command's own --help).
SHORT_HELP = {
    "topo": "Map GPUs, RDMA adapters, PCIe and NUMA; judge the layout.",
    "counters": "Port error, backpressure and throughput counters.",
    "fabric": "The InfiniBand subnet: SM, links, switch-side counters.",
    "verdict": "Is the network the bottleneck of this training job?",
    "snapshot": "Capture the sysfs subset ibdiag reads, for --root.",
    "sweep": "Find the bad node, rail or link of a cluster.",
    "report": "One fleet view from many nodes' ibdiag JSON.",
    "job": "NCCL's RAS and Inspector: which rank, where, why.",
    "bench": "Measure the fabric: p2p, collectives, imported logs.",
    "serve": "Serve 'ibdiag bench p2p' clients (like ib_write_bw).",
    "p2p": "Bandwidth and latency to HOST (like ib_write_bw, iperf3).",
    "collective": "Collective bus bandwidth, like nccl-tests.",
    "import": "Read nccl-tests and perftest logs as ibdiag results.",
}


class LazyGroup(TyperGroup):
    """A group whose commands (:data:`COMMANDS`) are imported on first use.

    ``get_command`` imports the module that registers the command on its typer app and converts that
    one command; the help listing and the "did you mean" suggestions use the names and
    :data:`SHORT_HELP` without importing anything. Commands already imported (a test that imported
    every module, a second run in the same process) are converted by typer as usual.
    """

    def _lazy(self) -> dict[str, str]:
        return COMMANDS.get(self.name or "", {})

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(self._lazy())
        return names + [n for n in self.commands if n not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = self.commands.get(cmd_name)
        if cmd is None and cmd_name in self._lazy():
            cmd = self._load(cmd_name)
        return cmd

    def _load(self, name: str) -> Any:
        from typer.main import get_command_from_info, get_command_name

        module = self._lazy()[name]
        importlib.import_module(module)
        typer_app = TYPER_APPS[self.name or ""]
        for info in typer_app.registered_commands:
            if (info.name or get_command_name(info.callback.__name__)) == name:  # type: ignore[union-attr]  # typer's callback is Optional; a registered command has one
                cmd = get_command_from_info(
                    info,
                    pretty_exceptions_short=typer_app.pretty_exceptions_short,
                    rich_markup_mode=typer_app.rich_markup_mode,
                )
                self.add_command(cmd, name)
                return cmd
        raise RuntimeError(
            f"{module} does not register the command {name!r} (ibdiag.cli.app.COMMANDS is wrong)"
        )

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name)
            if name in SHORT_HELP:  # loaded or not, lazily or by typer: the same summary
                rows.append((name, SHORT_HELP[name]))
            elif cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # typer's own suggestion looks only at the commands already loaded; this one at all names.
        try:
            return self._click_resolve_command(ctx, args)
        except click.exceptions.UsageError as e:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                e.message = (
                    e.message.rstrip(".")
                    + ". Did you mean "
                    + ", ".join(repr(m) for m in matches)
                    + "?"
                )
            raise


# "\b" keeps click from re-wrapping the table (click's no-rewrap paragraph marker).
EXIT_STATUS_HELP = "Exit status:\n\n\b\n" + "\n".join(
    f"  {code:>3}  {text}" for code, text in EXIT_STATUS_TABLE
)


class IbdiagGroup(LazyGroup):
    """Root command group: usage errors as ``ibdiag: error: ...`` + ``hint:`` and exit 2.

    Runs click in non-standalone mode and answers what click would otherwise print in its own style
    through the one error writer. The process boundary (the session, ``--textfile``, ``--exit-codes``)
    is :func:`ibdiag.cli.main.main`, which calls this; ``app()`` called directly (typer's test runner)
    parses and answers errors the same way, without that boundary.
    """

    def main(  # type: ignore[override]  # click's windows_expand_args (Windows only) goes through **extra
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        session = current()
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name or "ibdiag",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except (
            click.exceptions.NoArgsIsHelpError
        ) as e:  # `ibdiag` / `ibdiag bench` alone: show help, exit 2
            write_to(session.env.stdout, e.ctx.get_help() + "\n")
            rv = int(ExitStatus.USAGE)
        except click.exceptions.UsageError as e:
            cmd = e.ctx.command_path if e.ctx is not None else "ibdiag"
            rv = write_error(session, e.format_message(), f"see '{cmd} --help'", ExitStatus.USAGE)
        except click.exceptions.ClickException as e:
            rv = write_error(session, e.format_message(), "see 'ibdiag --help'", ExitStatus.USAGE)
        except typer.Abort:
            rv = write_error(session, "interrupted", None, ExitStatus.INTERRUPTED)
        except SystemExit as e:
            # Non-standalone typer exits only when printing --help hit a closed pipe (EPIPE -> exit 1):
            # the reader went away, nothing more to say to it (as for a command's output, common.py).
            if e.code != 1:
                raise
            rv = int(ExitStatus.OK)
        if not isinstance(rv, int):
            rv = 0
        if standalone_mode:
            raise SystemExit(rv)
        return rv


# Shell completion (`_IBDIAG_COMPLETE=source_bash ibdiag`, scripts in completions/) without the
# --install-completion options: typer registers its shell classes only when add_completion is on.
completion_init()

app = typer.Typer(
    cls=IbdiagGroup,
    name="ibdiag",
    help="Is the scale-out fabric (InfiniBand/RoCE, GPUDirect RDMA) of this GPU node healthy, and is it what slows training down?",
    epilog=EXIT_STATUS_HELP,
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        write_to(current().env.stdout, f"ibdiag {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show Python tracebacks for errors (any command).")
    ] = False,
) -> None:
    if debug:
        current().debug = True


bench_app = typer.Typer(
    cls=LazyGroup,
    name="bench",
    help="Measure what the fabric delivers: point-to-point (serve/p2p), collectives, or import existing logs.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(bench_app, name="bench", short_help=SHORT_HELP["bench"])

#: The typer app behind each group name of :data:`COMMANDS`.
TYPER_APPS = {"ibdiag": app, "bench": bench_app}
