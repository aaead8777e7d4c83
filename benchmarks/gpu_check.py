"""``make gpu-check``: the NCCL path of ``ibdiag bench collective`` on a real GPU, in one report, in under 5 minutes.

What it runs (each a check in the report; the run fails when any check fails):

1. ``gpu``: a GPU is present (``nvidia-smi -L`` and ``torch.cuda.device_count()``). Without one the check
   FAILS with "no GPU present": it never passes vacuously.
2. ``topo``: ``ibdiag topo -o json`` on the real ``/sys`` next to ``nvidia-smi topo -m``; every GPU
   nvidia-smi lists (by PCI bus id) must be in ibdiag's GPU list.
3. ``collective.<op>``: ``ibdiag bench collective --backend nccl --nproc 1`` for every op at 8 B ... 1 GiB
   with validation: backend nccl, a ``cuda:`` device, #wrong 0 in every row.
4. ``timing``: ibdiag's CUDA-event time of an in-place all_reduce against a bare torch loop on the same
   GPU (warm-up, then 20 calls between two CUDA events, as nccl-tests times), interleaved A B A B for
   :data:`PAIRS` pairs; median ratio and spread per size. Fails when the median ratio at 64 MiB and above
   is outside :data:`RATIO_LIMITS` (ibdiag adds no work to the timed loop, so large sizes must agree).
5. With two or more GPUs: ``collective2.<op>`` (2-rank runs of every op) and ``failure``: a rank that
   stops answering (test hook ``hang:rank=1,step=2``) must end the run with exit 3 naming rank 1.

World size 1 (:data:`WORLD_1`): NCCL refuses two ranks on one GPU, so one GPU gives one rank.

Usage: ``python benchmarks/gpu_check.py [--out gpu-check.json]`` (``make gpu-check``). The ranks run
``python -m ibdiag`` with this repository on ``PYTHONPATH``, under the interpreter running this script
(the GPU machine's own Python with its CUDA build of torch); typer, rich and psutil must be importable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "sendrecv",
)
SIZES = "8:1G"
SIZES_2 = "8:256M"
BARE_SIZES = (8, 1 << 20, 64 << 20, 1 << 30)
PAIRS = 5
ITERS, WARMUP = 20, 5
RATIO_LIMITS = (0.9, 1.1)
"""ibdiag / bare median time ratio allowed at 64 MiB and above."""
BUDGET_S = 290.0
WORLD_1 = {
    "proves": "the NCCL branch runs on a real GPU: binding to the GPU, init_process_group(device_id=...), every op's "
    "torch.distributed call on CUDA tensors, CUDA-event timing and polled waits, validation of every element on the GPU, "
    "teardown, and the results schema with backend nccl",
    "does_not_prove": "anything about communication: with one rank NCCL moves no data between GPUs or hosts (a local copy "
    "at most), so bus bandwidth is 0 or meaningless; NVLink, PCIe P2P, InfiniBand/RoCE, GPUDirect RDMA, multi-rank "
    "rendezvous over NCCL, stragglers and the hung-peer path need two or more GPUs (runs below when present)",
}

RunResult = dict[str, Any]
Runner = Callable[[Sequence[str], float, "dict[str, str] | None"], RunResult]


class NoGpu(Exception):
    pass


def run(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> RunResult:
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
        )
        rc, out, err = p.returncode, p.stdout, p.stderr
    except FileNotFoundError as e:
        rc, out, err = 127, "", str(e)
    except subprocess.TimeoutExpired as e:
        rc, out, err = (
            124,
            (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""),
            f"timed out after {timeout:g} s",
        )
    return {
        "cmd": " ".join(cmd),
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 2),
        "stdout": out,
        "stderr": err,
    }


def ibdiag(*args: str) -> list[str]:
    return [sys.executable, "-m", "ibdiag", *args]


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "IBDIAG_"))
    }
    env["PYTHONPATH"] = str(REPO) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.update(extra)
    return env


# --- pure checks (the normal suite tests these on CPU) -----------------------------------------------


def gpu_presence(smi: RunResult | None, torch_count: int | None) -> dict[str, Any]:
    """The ``gpu`` check; NoGpu when no GPU is present."""
    names = [
        ln.strip()
        for ln in (smi or {}).get("stdout", "").splitlines()
        if ln.strip().startswith("GPU ")
    ]
    if smi is None or smi.get("rc") != 0 or not names or not torch_count:
        why = (
            "nvidia-smi not found"
            if smi is None
            else (f"nvidia-smi -L: {len(names)} GPU(s), rc {smi.get('rc')}")
        )
        raise NoGpu(f"no GPU present ({why}; torch.cuda.device_count() = {torch_count})")
    return {"nvidia_smi": names, "torch_device_count": torch_count}


def norm_bus_id(text: str) -> str:
    """``00000000:18:00.0`` (nvidia-smi) and ``0000:18:00.0`` (sysfs) -> ``0000:18:00.0``."""
    t = text.strip().lower()
    return t[-12:] if len(t) >= 12 else t


def topo_problems(topo_doc: dict[str, Any], smi_bus_ids: Sequence[str]) -> list[str]:
    found = {norm_bus_id(g.get("pci", "")) for g in topo_doc.get("gpus", [])}
    return [
        f"GPU {b} (nvidia-smi) is not in ibdiag topo's GPUs {sorted(found)}"
        for b in smi_bus_ids
        if norm_bus_id(b) not in found
    ]


def collective_problems(doc: dict[str, Any], op: str, world: int) -> list[str]:
    """What is wrong with a ``bench collective -o json`` result for a real NCCL run."""
    out = []
    if doc.get("backend") != "nccl":
        out.append(f"backend is {doc.get('backend')!r}, not nccl")
    if doc.get("op") != op or doc.get("world_size") != world:
        out.append(f"op/world size {doc.get('op')}/{doc.get('world_size')}, expected {op}/{world}")
    rows = doc.get("results") or []
    if not rows:
        out.append("no rows")
    bad = [
        f"{r.get('bytes')} B {'in' if r.get('in_place') else 'out-of'}-place: #wrong {r.get('wrong')}"
        for r in rows
        if r.get("wrong") != 0
    ]
    if bad:
        out.append("validation: " + "; ".join(bad[:5]))
    devices = [str(p.get("device", "")) for p in doc.get("per_rank", [])]
    if len(devices) != world or not all(
        d.startswith("cuda:") and "stand-in" not in d for d in devices
    ):
        out.append(f"devices {devices} are not {world} real CUDA devices")
    return out


def in_place_times(doc: dict[str, Any]) -> dict[int, float]:
    return {
        int(r["bytes"]): float(r["time_us"]) for r in doc.get("results", []) if r.get("in_place")
    }


def timing_summary(pairs: Sequence[tuple[dict[int, float], dict[int, float]]]) -> dict[str, Any]:
    """Per size: median ibdiag/bare ratio over the pairs, its spread, and whether large sizes agree."""
    sizes = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs))) if pairs else []
    rows, problems = [], []
    for s in sizes:
        ratios = [a[s] / b[s] for a, b in pairs if b[s] > 0]
        if not ratios:
            continue
        med = statistics.median(ratios)
        rows.append(
            {
                "bytes": s,
                "ibdiag_us": statistics.median(a[s] for a, _ in pairs),
                "bare_us": statistics.median(b[s] for _, b in pairs),
                "median_ratio": med,
                "min_ratio": min(ratios),
                "max_ratio": max(ratios),
                "pairs": len(ratios),
            }
        )
        if s >= 64 << 20 and not RATIO_LIMITS[0] <= med <= RATIO_LIMITS[1]:
            problems.append(f"{s} B: ibdiag/bare median ratio {med:.3f} outside {RATIO_LIMITS}")
    if not rows:
        problems.append("no size measured by both")
    return {"rows": rows, "problems": problems}


def failure_problems(res: RunResult, timeout_s: float) -> list[str]:
    err = res.get("stderr", "")
    out = []
    if res.get("rc") != 3:
        out.append(f"exit {res.get('rc')}, expected 3")
    if "rank 1" not in err:
        out.append("rank 1 (the stuck one) is not named")
    if "Traceback" in err:
        out.append("a traceback was printed")
    if res.get("seconds", 0) > timeout_s + 60:
        out.append(f"took {res.get('seconds')} s for --timeout {timeout_s:g}")
    return out


# --- the bare loop (run in its own process) ----------------------------------------------------------


def bare_loop(
    sizes: Sequence[int], iters: int, warmup: int
) -> dict[int, float]:  # pragma: no cover - needs a GPU
    import datetime

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group(
        "nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0)
    )
    out = {}
    for size in sizes:
        t = torch.ones(max(1, size // 4), dtype=torch.float32, device="cuda")
        for _ in range(warmup):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            dist.all_reduce(t)
        b.record()
        b.synchronize()
        out[size] = a.elapsed_time(b) * 1e3 / iters
        del t
    dist.destroy_process_group()
    return out


# --- the run ---------------------------------------------------------------------------------------


def _check(report: dict[str, Any], name: str, problems: Sequence[str], **detail: Any) -> None:
    report["checks"].append(
        {"name": name, "ok": not problems, "problems": list(problems), **detail}
    )


def _json(res: RunResult) -> dict[str, Any] | None:
    try:
        return json.loads(res["stdout"]) if res["rc"] == 0 else None
    except json.JSONDecodeError:
        return None


def _torch_count(runner: Runner) -> int | None:
    res = runner(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
        ],
        120,
        None,
    )
    try:
        return int(res["stdout"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def gpu_check(runner: Runner = run, *, pairs: int = PAIRS) -> dict[str, Any]:
    t0 = time.monotonic()
    report: dict[str, Any] = {"kind": "ibdiag.gpu-check/1", "checks": [], "world_size_1": WORLD_1}
    smi = (
        runner(["nvidia-smi", "-L"], 60, None)
        if shutil.which("nvidia-smi") or runner is not run
        else None
    )
    try:
        gpus = gpu_presence(smi, _torch_count(runner))
    except NoGpu as e:
        _check(report, "gpu", [str(e)])
        return report
    _check(report, "gpu", [], **gpus)
    ngpu = min(len(gpus["nvidia_smi"]), int(gpus["torch_device_count"]))
    q = runner(
        [
            "nvidia-smi",
            "--query-gpu=index,name,pci.bus_id,driver_version,memory.total",
            "--format=csv,noheader",
        ],
        60,
        None,
    )
    report["machine"] = {"gpus": q["stdout"].strip().splitlines(), "python": sys.version.split()[0]}
    vers = runner(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.__version__, torch.version.cuda, '.'.join(map(str, torch.cuda.nccl.version())))",
        ],
        120,
        None,
    )
    report["machine"]["torch_cuda_nccl"] = vers["stdout"].strip()
    topo = runner(ibdiag("topo", "-o", "json"), 120, child_env())
    smi_topo = runner(["nvidia-smi", "topo", "-m"], 60, None)
    report["topo"] = {
        "ibdiag": _json(topo) or topo["stderr"][-2000:],
        "nvidia_smi_topo_m": smi_topo["stdout"],
    }
    bus_ids = [ln.split(",")[2].strip() for ln in report["machine"]["gpus"] if ln.count(",") >= 2]
    tdoc = _json(topo)
    _check(
        report,
        "topo",
        ["ibdiag topo failed: " + topo["stderr"][-300:]]
        if tdoc is None
        else topo_problems(tdoc, bus_ids),
    )

    def collective(op: str, n: int, sizes: str, iters: int, warmup: int, **env: str) -> RunResult:
        args = (
            "bench",
            "collective",
            "--backend",
            "nccl",
            "--nproc",
            str(n),
            "--op",
            op,
            "--sizes",
            sizes,
            "--iters",
            str(iters),
            "--warmup",
            str(warmup),
            "--timeout",
            "60",
            "-o",
            "json",
        )
        return runner(ibdiag(*args), 240, child_env(**env))

    for op in OPS:
        res = collective(op, 1, SIZES, 10, 2)
        doc = _json(res)
        _check(
            report,
            f"collective.{op}",
            [f"exit {res['rc']}: {res['stderr'][-400:]}"]
            if doc is None
            else collective_problems(doc, op, 1),
            seconds=res["seconds"],
        )
    measured: list[tuple[dict[int, float], dict[int, float]]] = []
    bare_cmd = [sys.executable, str(Path(__file__).resolve()), "--bare-loop"]
    problems: list[str] = []
    for _ in range(pairs):
        a = collective("all_reduce", 1, ",".join(str(s) for s in BARE_SIZES), ITERS, WARMUP)
        b = runner(bare_cmd, 180, child_env())
        da = _json(a)
        try:
            db = (
                {int(k): float(v) for k, v in json.loads(b["stdout"]).items()}
                if b["rc"] == 0
                else None
            )
        except (json.JSONDecodeError, ValueError, AttributeError):
            db = None
        if da is None or db is None:
            problems.append(
                f"pair failed: ibdiag exit {a['rc']} {a['stderr'][-200:]}; bare exit {b['rc']} {b['stderr'][-200:]}"
            )
            break
        measured.append((in_place_times(da), db))
    summary = timing_summary(measured) if measured else {"rows": [], "problems": []}
    _check(report, "timing", problems + summary["problems"], rows=summary["rows"])
    if ngpu >= 2:
        for op in OPS:
            res = collective(op, 2, SIZES_2, 10, 2)
            doc = _json(res)
            _check(
                report,
                f"collective2.{op}",
                [f"exit {res['rc']}: {res['stderr'][-400:]}"]
                if doc is None
                else collective_problems(doc, op, 2),
                seconds=res["seconds"],
            )
        args = (
            "bench",
            "collective",
            "--backend",
            "nccl",
            "--nproc",
            "2",
            "--sizes",
            "1M,2M,4M",
            "--iters",
            "5",
            "--warmup",
            "1",
            "--timeout",
            "10",
        )
        res = runner(ibdiag(*args), 180, child_env(IBDIAG_TEST_HOOK="hang:rank=1,step=2"))
        _check(
            report,
            "failure",
            failure_problems(res, 10),
            stderr=res["stderr"][-1500:],
            seconds=res["seconds"],
        )
    else:
        report["not_run"] = "2-rank runs and the hung-rank path: this machine has one GPU"
    report["seconds"] = round(time.monotonic() - t0, 1)
    if report["seconds"] > BUDGET_S:
        _check(report, "budget", [f"took {report['seconds']} s, over {BUDGET_S:g} s"])
    return report


def render_text(report: dict[str, Any]) -> str:
    lines = ["ibdiag gpu-check"]
    for c in report["checks"]:
        lines.append(
            f"  {'PASS' if c['ok'] else 'FAIL'} {c['name']}"
            + ("" if c["ok"] else ": " + "; ".join(c["problems"]))
        )
    for r in next((c.get("rows", []) for c in report["checks"] if c["name"] == "timing"), []):
        lines.append(
            f"    all_reduce {r['bytes']:>11} B  ibdiag {r['ibdiag_us']:10.1f} us  bare {r['bare_us']:10.1f} us  ratio {r['median_ratio']:.3f} [{r['min_ratio']:.3f}..{r['max_ratio']:.3f}] x{r['pairs']}"
        )
    if report.get("not_run"):
        lines.append(f"  not run: {report['not_run']}")
    ok = bool(report["checks"]) and all(c["ok"] for c in report["checks"])
    lines.append("gpu-check: " + ("PASSED" if ok else "FAILED"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-check.json", help="where to write the JSON report")
    ap.add_argument("--bare-loop", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bare_loop:  # pragma: no cover - needs a GPU
        print(json.dumps(bare_loop(BARE_SIZES, ITERS, WARMUP)))
        return 0
    report = gpu_check()
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    text = render_text(report)
    print(text)
    print(f"report: {args.out}")
    return 0 if text.endswith("PASSED") else 1


if __name__ == "__main__":
    sys.exit(main())
