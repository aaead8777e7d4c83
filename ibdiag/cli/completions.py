"""Write the shell completion scripts in ``completions/`` from the app: ``python -m ibdiag.cli.completions DIR``.

The scripts are what ``_IBDIAG_COMPLETE=source_<shell> ibdiag`` prints; they call back into ibdiag at
completion time, so new commands and options complete without regenerating. A test regenerates them
and fails when the committed copies are stale.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: shell -> file name its completion loader looks for.
SCRIPTS = {"bash": "ibdiag.bash", "zsh": "_ibdiag", "fish": "ibdiag.fish"}


def script(shell: str) -> str:
    env = {**os.environ, "_IBDIAG_COMPLETE": f"source_{shell}"}
    out = subprocess.run(
        [sys.executable, "-m", "ibdiag"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    if not out.stdout.strip():
        raise RuntimeError(f"no completion script for {shell}: {out.stderr.strip()}")
    return out.stdout if out.stdout.endswith("\n") else out.stdout + "\n"


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else Path("completions")
    directory.mkdir(parents=True, exist_ok=True)
    for shell, name in SCRIPTS.items():
        (directory / name).write_text(script(shell))
        sys.stdout.write(f"wrote {directory / name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
