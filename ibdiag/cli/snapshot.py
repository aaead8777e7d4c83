"""``ibdiag snapshot``: capture the sysfs subset ibdiag reads, for offline use with ``--root``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import env, handle_errors, read_config
from ibdiag.cli.options import ConfigOption, DebugOption
from ibdiag.node.command import SnapshotRequest, run, summary_text
from ibdiag.ports.config import PortsConfig

# Not the shared --root: the tree captured is a directory (a snapshot .tar.gz is captured already).
SnapshotRootOption = Annotated[
    Path, typer.Option("--root", metavar="DIR", help="Capture DIR/sys instead of /sys.")
]


@app.command("snapshot")
@handle_errors
def snapshot_command(
    output: Annotated[Path, typer.Argument(metavar="FILE.tar.gz", help="Archive to write.")],
    root: SnapshotRootOption = Path("/"),
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite FILE if it exists.")
    ] = False,
    config: ConfigOption = None,
    debug: DebugOption = False,
) -> int:
    """Capture the sysfs subset ibdiag reads into a .tar.gz, for `--root` on another machine."""
    # [ports] skip: a restricted function's files are never read, here as in topo and counters
    skip = read_config(config).section("ports", PortsConfig).skip
    summary = run(SnapshotRequest(output, root=root, force=force, skip_adapters=skip))
    env().stdout.write(summary_text(summary))
    return 0
