"""PFC and the DSCP -> priority table of a netdev, as iproute2's ``dcb -j`` prints them.

``dcb -j pfc show dev X`` prints ``{"pfc_cap":8,"macsec_bypass":false,"delay":0,"prio_pfc":[false,...]}``
(one boolean per priority 0..7: iproute2 dcb/dcb_pfc.c ``dcb_pfc_print_prio_pfc``), and
``dcb -j app show dev X`` the application table, ``"dscp_prio": [[26,3], ...]`` (DSCP, priority; older
iproute2 adds a third element, ignored: dcb/dcb_app.c ``dcb_app_print_filtered``).

Two sources: on the live node (``--root /``) ``dcb`` itself, run with a timeout; under another root,
the same JSON saved beside ``sys/`` as ``dcb/<netdev>/pfc.json`` and ``app.json``. Anything else —
no ``dcb`` binary, a driver without DCB (veth, virtio: "Operation not supported"), a timeout, no
saved file — is unknown, and says why; never a guess.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ibdiag.jsonread import Fields, JsonFieldError, check_integer, check_list, loads
from ibdiag.node.sysfs import Refused, read_inside, realpath
from ibdiag.text import safe_excerpt

PRIORITIES = 8
#: Seconds one ``dcb`` run may take (it answers from the kernel over netlink in milliseconds).
DCB_TIMEOUT_S = 5.0
#: Largest ``dcb -j`` output or saved file read.
MAX_DCB_BYTES = 65536
#: Deepest nesting dcb -j prints (an object of lists of pairs): 3 levels; more is not its output.
_DEPTH = 8


@dataclass(frozen=True)
class DcbState:
    """One netdev's PFC and DSCP table; ``None`` fields are unknown (``unknown_why`` says why)."""

    netdev: str
    pfc: tuple[bool, ...] | None = None
    """PFC enabled per priority 0..7."""
    dscp_prio: tuple[tuple[int, int], ...] | None = None
    """(DSCP, priority) entries of the application table; () when it has none."""
    source: str = "unknown"
    unknown_why: str | None = None

    @property
    def trust(self) -> str | None:
        """``dscp`` or ``pcp``: mlx5 trusts DSCP exactly while the app table has a DSCP entry
        (drivers/net/ethernet/mellanox/mlx5/core/en/en_dcbnl.c, mlx5e_dcbnl_ieee_setapp/delapp)."""
        if self.dscp_prio is None:
            return None
        return "dscp" if self.dscp_prio else "pcp"

    def to_json(self) -> dict[str, Any]:
        return {
            "pfc": None if self.pfc is None else [i for i, on in enumerate(self.pfc) if on],
            "dscp_prio": None if self.dscp_prio is None else [list(e) for e in self.dscp_prio],
            "trust": self.trust,
            "source": self.source,
            "unknown_why": self.unknown_why,
        }


def parse_pfc(text: str, where: str) -> tuple[bool, ...]:
    """``prio_pfc`` of ``dcb -j pfc show``; ValueError (JsonFieldError) when it is not that."""
    doc = Fields(loads(text, max_depth=_DEPTH), where)
    values = doc.items("prio_pfc", max_items=PRIORITIES)
    if len(values) != PRIORITIES or not all(isinstance(v, bool) for v in values):
        raise JsonFieldError(f"{where}.prio_pfc", f"must be {PRIORITIES} booleans")
    return tuple(values)


def parse_app(text: str, where: str) -> tuple[tuple[int, int], ...]:
    """``dscp_prio`` entries of ``dcb -j app show`` (none: ``()``)."""
    doc = Fields(loads(text, max_depth=_DEPTH), where)
    if not doc.has("dscp_prio"):
        return ()
    out = []
    for i, entry in enumerate(doc.items("dscp_prio", max_items=64 * PRIORITIES)):
        place = f"{where}.dscp_prio[{i}]"
        pair = check_list(entry, place, max_items=3)
        if len(pair) < 2:
            raise JsonFieldError(place, "must be [dscp, priority]")
        out.append(
            (
                check_integer(pair[0], place + "[0]", 0, 63),
                check_integer(pair[1], place + "[1]", 0, 7),
            )
        )
    return tuple(out)


def _parsed(netdev: str, pfc_text: str, app_text: str | None, source: str) -> DcbState:
    try:
        pfc = parse_pfc(pfc_text, f"{source} pfc")
        app = parse_app(app_text, f"{source} app") if app_text is not None else None
    except ValueError as e:
        return DcbState(
            netdev, source=source, unknown_why=f"unreadable output: {safe_excerpt(e, 200)}"
        )
    return DcbState(netdev, pfc, app, source, None if app is not None else "no application table")


def read_saved(root: str | os.PathLike[str], netdev: str) -> DcbState:
    """``ROOT/dcb/<netdev>/{pfc,app}.json``: what ``dcb -j`` printed on the node."""
    base_dir = os.path.join(root, "dcb")
    if not os.path.isdir(base_dir):
        return DcbState(
            netdev, unknown_why="no dcb/ beside sys/ in this tree (dcb runs only on the live node)"
        )
    base = realpath(base_dir)
    real_root = realpath(root)
    if base == real_root or os.path.commonpath([base, real_root]) != real_root:
        # an untrusted tree's dcb/ must not lead to another directory of this machine
        return DcbState(netdev, unknown_why="dcb/ leads outside the tree; not read")
    texts: dict[str, str | None] = {}
    for name in ("pfc", "app"):
        try:
            texts[name] = read_inside(
                os.path.join(base_dir, netdev, f"{name}.json"), base, limit=MAX_DCB_BYTES
            ).decode("utf-8", "replace")
        except (OSError, Refused):
            texts[name] = None
    pfc_text = texts["pfc"]
    if pfc_text is None:
        return DcbState(netdev, unknown_why=f"no dcb/{netdev}/pfc.json in this tree")
    return _parsed(netdev, pfc_text, texts["app"], f"dcb/{netdev}")


def _run(dcb_path: str, args: list[str], timeout_s: float) -> tuple[str | None, str]:
    """(stdout, '') of one dcb run, or (None, why)."""
    import subprocess  # only the live node runs dcb

    try:
        res = subprocess.run(
            [dcb_path, "-j", *args],
            capture_output=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"dcb did not answer within {timeout_s:g} s"
    except OSError as e:
        return None, f"cannot run {dcb_path}: {e.strerror}"
    if res.returncode != 0:
        err = res.stderr[:MAX_DCB_BYTES].decode("utf-8", "replace").strip().splitlines()
        return (
            None,
            f"dcb {' '.join(args)}: {safe_excerpt(err[-1] if err else f'exit {res.returncode}', 200)}",
        )
    return res.stdout[:MAX_DCB_BYTES].decode("utf-8", "replace"), ""


def read_live(dcb_path: str | None, netdev: str, *, timeout_s: float = DCB_TIMEOUT_S) -> DcbState:
    """``dcb -j pfc show dev X`` and ``dcb -j app show dev X`` on this node."""
    if dcb_path is None:
        return DcbState(
            netdev, unknown_why="iproute2's dcb is not installed (apt-get install iproute2)"
        )
    pfc, why = _run(dcb_path, ["pfc", "show", "dev", netdev], timeout_s)
    if pfc is None:
        return DcbState(netdev, source="dcb -j", unknown_why=why)
    app, why = _run(dcb_path, ["app", "show", "dev", netdev], timeout_s)
    return _parsed(netdev, pfc, app, "dcb -j")
