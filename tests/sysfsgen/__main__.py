"""``python -m tests.sysfsgen [OUTDIR] [PROFILE ...]``: (re)write the fixture trees.

Each profile's ``OUTDIR/<name>/sys``, ``proc`` and ``ibdiag-snapshot.json`` are replaced; its README stays.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.sysfsgen import generate


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("fixtures/sysfs")
    names = argv[1:] or None
    for name in generate(out, names):
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
