"""``ibdiag snapshot``: capture the sysfs subset ibdiag reads, for offline use with ``--root``."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import ConfigOption, DebugOption, env, handle_errors, read_config


@app.command("snapshot")
@handle_errors
def snapshot_command(
    output: Annotated[Path, typer.Argument(metavar="FILE.tar.gz", help="Archive to write.")],
    root: Annotated[
        Path, typer.Option("--root", metavar="DIR", help="Capture DIR/sys instead of /sys.")
    ] = Path("/"),
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite FILE if it exists.")
    ] = False,
    config: ConfigOption = None,
    debug: DebugOption = False,
) -> int:
    """Capture the sysfs subset ibdiag reads into a .tar.gz, for `--root` on another machine."""
    from ibdiag.errors import UsageError
    from ibdiag.node.snapshot import read_manifest, write_snapshot
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.outfile import check_output_path
    from ibdiag.ports.config import PortsConfig

    check_output_path(
        output, "snapshot"
    )  # a directory, device, FIFO or socket: refused even with --force
    if output.exists() and not force:
        raise UsageError(
            f"{output} exists", hint="pass --force to overwrite it, or choose another name"
        )
    # [ports] skip: a restricted function's files are never read, here as in topo and counters
    skip = read_config(config).section("ports", PortsConfig).skip
    sysfs = SysfsRoot(root, skip_adapters=skip).check()
    manifest = read_manifest(root) if str(root) != "/" else None
    host = str(manifest["host"]) if manifest and manifest.get("host") else socket.gethostname()
    summary = write_snapshot(sysfs, output, host=host)
    out = env().stdout
    out.write(
        f"wrote {summary.path}: {summary.files} files, {summary.links} links "
        f"({summary.pci_devices} PCI functions, {summary.adapters} RDMA adapters)\n"
        f"read it back with: ibdiag topo --root {summary.path}\n"
    )
    if summary.skipped:
        out.write(
            f"skipped ([ports] skip, named in the manifest): {', '.join(summary.skipped)}: not read, not in the archive\n"
        )
    if summary.unreadable:
        out.write(
            f"{len(summary.unreadable)} attribute(s) could not be read and are left out (listed in the manifest)\n"
        )
    return 0
