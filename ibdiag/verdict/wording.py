"""How the verdict writes gradient sizes, bandwidths and parameter counts in its sentences and charts."""

from __future__ import annotations


def gb(nbytes: float) -> str:
    """Decimal gigabytes, as gradient sizes are quoted (``16 GB``, ``31.94 GB``)."""
    if nbytes >= 1e9:
        return f"{nbytes / 1e9:.4g} GB"
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.4g} MB"
    return f"{nbytes:.4g} B"


def gbs(x: float) -> str:
    return f"{x:.4g} GB/s"


def count_text(x: float) -> str:
    """Parameter counts as people write them: ``8e9``, ``7e10``, ``1.5e12``, ``350000``."""
    if x < 1e6:
        return f"{x:.6g}"
    exp = len(str(int(x))) - 1
    return f"{x / 10**exp:.4g}e{exp}"
