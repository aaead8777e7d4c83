"""The typer application and the group that gives every error the ``ibdiag: error:`` form."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer import _click as click  # typer vendors click; this is the same click its exceptions come from (typer pinned in pyproject)
from typer._completion_classes import completion_init
from typer.core import TyperGroup

from ibdiag import __version__
from ibdiag.errors import EXIT_STATUS_TABLE, ExitStatus
from ibdiag.cli.env import current
from ibdiag.cli.errors import write_error, write_to

# "\b" keeps click from re-wrapping the table (click's no-rewrap paragraph marker).
EXIT_STATUS_HELP = "Exit status:\n\n\b\n" + "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_STATUS_TABLE)


class IbdiagGroup(TyperGroup):
    """Root command group: usage errors as ``ibdiag: error: ...`` + ``hint:`` and exit 2.

    Runs click in non-standalone mode and answers what click would otherwise print in its own style
    through the one error writer. Called as ``app()`` (``python -m ibdiag``, typer's test runner), it
    goes through the boundary, :func:`ibdiag.cli.main.main`, like the console script.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if standalone_mode and complete_var is None and not extra:
            from ibdiag.cli.main import main

            raise SystemExit(int(main(args)))
        session = current()
        try:
            rv = super().main(args=args, prog_name=prog_name or "ibdiag", complete_var=complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # `ibdiag` / `ibdiag bench` alone: show help, exit 2
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
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks for errors (any command).")] = False,
) -> None:
    if debug:
        current().debug = True


bench_app = typer.Typer(
    name="bench",
    help="Measure what the fabric delivers: point-to-point (serve/p2p), collectives, or import existing logs.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(bench_app, name="bench")
