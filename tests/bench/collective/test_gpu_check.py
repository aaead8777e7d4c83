"""``make gpu-check``'s CPU-only parts: it fails without a GPU (never passes vacuously), and its checks and
report judge what the GPU machine prints. ``FakeGpuMachine`` is a named fake at the one boundary that
cannot exist here (nvidia-smi and CUDA); it proves the script's logic, not the GPU path.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.env import REPO

spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
gc = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gc
spec.loader.exec_module(gc)


def _doc(
    op: str,
    world: int,
    *,
    backend: str = "nccl",
    wrong: int = 0,
    device: str = "cuda:0 NVIDIA H200",
) -> dict:
    rows = [
        {"bytes": b, "in_place": True, "time_us": 10.0 + b / 1e6, "wrong": wrong}
        for b in gc.BARE_SIZES
    ]
    return {
        "backend": backend,
        "op": op,
        "world_size": world,
        "results": rows,
        "per_rank": [{"device": device.replace("cuda:0", f"cuda:{r}")} for r in range(world)],
    }


class FakeGpuMachine:
    """FAKE: answers the commands gpu_check runs the way a GPU machine would (canned outputs)."""

    def __init__(
        self, gpus: int = 1, *, bare_us: float = 0.0, doc_edit=None, hang_rc: int = 3
    ) -> None:
        self.gpus, self.bare_us, self.doc_edit, self.hang_rc = gpus, bare_us, doc_edit, hang_rc
        self.calls: list[str] = []

    def __call__(self, cmd, timeout, env=None):
        text = " ".join(cmd)
        self.calls.append(text)
        ok = {"rc": 0, "seconds": 1.0, "stderr": "", "cmd": text}
        if cmd[:2] == ["nvidia-smi", "-L"]:
            return {
                **ok,
                "stdout": "".join(
                    f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})\n" for i in range(self.gpus)
                ),
            }
        if "--query-gpu" in text:
            return {
                **ok,
                "stdout": "".join(
                    f"{i}, NVIDIA H200, 00000000:{0x18 + i:02X}:00.0, 570.1, 143771 MiB\n"
                    for i in range(self.gpus)
                ),
            }
        if cmd[:3] == ["nvidia-smi", "topo", "-m"]:
            return {**ok, "stdout": "\tGPU0\nGPU0\t X\n"}
        if "device_count" in text:
            return {**ok, "stdout": f"{self.gpus}\n"}
        if "torch.version.cuda" in text:
            return {**ok, "stdout": "2.13.0 12.8 2.27.3\n"}
        if "topo" in cmd:
            return {
                **ok,
                "stdout": json.dumps(
                    {"gpus": [{"pci": f"0000:{0x18 + i:02x}:00.0"} for i in range(self.gpus)]}
                ),
            }
        if "--bare-loop" in cmd:
            return {
                **ok,
                "stdout": json.dumps(
                    {str(b): 10.0 + b / 1e6 + self.bare_us for b in gc.BARE_SIZES}
                ),
            }
        if "collective" in cmd:
            if env and "hang:rank=1" in env.get("IBDIAG_TEST_HOOK", ""):
                return {
                    **ok,
                    "rc": self.hang_rc,
                    "stdout": "",
                    "stderr": "ibdiag: error: rank 0: step 2/6 (...) did not complete within 10 s; ranks that did not answer: rank 1 on h (pid 9): alive but did not reach step 2\n",
                }
            op = cmd[cmd.index("--op") + 1]
            doc = _doc(op, int(cmd[cmd.index("--nproc") + 1]))
            if self.doc_edit:
                self.doc_edit(doc)
            return {**ok, "stdout": json.dumps(doc)}
        raise AssertionError(f"unexpected command {text}")


def _names(report):
    return {c["name"]: c["ok"] for c in report["checks"]}


@pytest.mark.slow
def test_without_a_gpu_it_fails_saying_no_gpu_is_present(tmp_path):
    out = tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert (
        "FAIL gpu: no GPU present" in res.stdout
        and res.stdout.rstrip().splitlines()[-2] == "gpu-check: FAILED"
    )
    report = json.loads(out.read_text())
    assert _names(report) == {"gpu": False}


def test_a_good_one_gpu_machine_passes_and_says_what_world_size_1_proves():
    m = FakeGpuMachine(1)
    report = gc.gpu_check(m)
    assert all(_names(report).values()), report["checks"]
    assert set(_names(report)) == {"gpu", "topo", "timing", *(f"collective.{op}" for op in gc.OPS)}
    assert "not_run" in report and "moves no data" in report["world_size_1"]["does_not_prove"]
    assert sum("--bare-loop" in c for c in m.calls) == gc.PAIRS  # interleaved pairs
    assert gc.render_text(report).endswith("PASSED")


def test_two_gpus_add_two_rank_runs_and_the_failure_path():
    report = gc.gpu_check(FakeGpuMachine(2))
    names = _names(report)
    assert names["failure"] and all(names[f"collective2.{op}"] for op in gc.OPS)
    report = gc.gpu_check(FakeGpuMachine(2, hang_rc=0))
    assert _names(report)["failure"] is False


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.update(backend="nccl-stand-in"), "not nccl"),
        (lambda d: d["results"][1].update(wrong=3), "#wrong 3"),
        (lambda d: d["per_rank"][0].update(device="cuda:0 CPU stand-in (test fake)"), "real CUDA"),
    ],
)
def test_a_stand_in_or_wrong_result_fails(edit, problem):
    report = gc.gpu_check(FakeGpuMachine(1, doc_edit=edit))
    bad = [c for c in report["checks"] if not c["ok"]]
    assert bad and any(problem in p for c in bad for p in c["problems"])


def test_timing_that_disagrees_at_large_sizes_fails():
    report = gc.gpu_check(
        FakeGpuMachine(1, bare_us=-200.0)
    )  # the bare loop 200 µs faster everywhere
    timing = next(c for c in report["checks"] if c["name"] == "timing")
    assert not timing["ok"] and "outside" in timing["problems"][0]


def test_pure_helpers():
    assert gc.norm_bus_id("00000000:18:00.0") == gc.norm_bus_id("0000:18:00.0") == "0000:18:00.0"
    assert gc.topo_problems({"gpus": [{"pci": "0000:18:00.0"}]}, ["00000000:19:00.0"])
    pairs = [
        ({8: 11.0, 1 << 30: 1000.0}, {8: 10.0, 1 << 30: 1000.0 * f})
        for f in (1.0, 1.02, 0.98, 1.01, 0.99)
    ]
    rows = gc.timing_summary(pairs)["rows"]
    assert rows[0]["median_ratio"] == pytest.approx(1.1) and rows[1]["pairs"] == 5
    assert 0.97 < rows[1]["min_ratio"] <= rows[1]["median_ratio"] <= rows[1]["max_ratio"] < 1.03
    with pytest.raises(gc.NoGpu):
        gc.gpu_presence({"rc": 0, "stdout": "GPU 0: X\n"}, 0)
    doc = _doc("all_reduce", 1)
    assert gc.collective_problems(copy.deepcopy(doc), "all_reduce", 1) == []
