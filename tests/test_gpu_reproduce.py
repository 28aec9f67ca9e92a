"""bench/gpu/reproduce.sh really run where no GPU is (issue 31): every case is listed in the
summary with its expected class beside the verdict, each case directory holds the documented
files, each case says why it was skipped, the CPU halves exit 0, the versions file is there,
and to_corpus.py writes no corpus case from such a run. Not a GPU test: it runs everywhere."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GPU_DIR = REPO / "bench" / "gpu"
VERSION_KEYS = ("driver", "cuda_driver_api", "cuda_runtime_torch", "nvcc", "torch", "nccl",
                "gpu_name", "cupy", "jax", "python", "gpu_present")


def _reproduce_module():
    spec = importlib.util.spec_from_file_location("gpu_reproduce", GPU_DIR / "reproduce.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    # --no-gpu: the CPU halves even on a machine that has a GPU (there the reason says so)
    r = subprocess.run(["bash", str(GPU_DIR / "reproduce.sh"), "--no-gpu"], env=env,
                       capture_output=True, text=True, timeout=170, cwd="/")
    return r, out


def test_exits_0_and_lists_every_case(run):
    r, out = run
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((out / "summary.json").read_text())
    mod = _reproduce_module()
    assert s["complete"] is True and s["gpu_used"] is False
    assert [c["case"] for c in s["cases"]] == [c.name for c in mod.CASE_LIST]
    # the classes the issue names, each with at least one case
    assert {"cuda_oom", "cuda_device_assert", "cuda_error", "nccl_error", "collective_timeout",
            "nan_divergence", "gpu_hardware", "success"} <= {c["expected"] for c in s["cases"]}
    assert {c["case"] for c in s["cases"]} >= {
        "cuda_device_assert-index", "cuda_device_assert-index-blocking",
        "cuda_error-nvcc-illegal-address", "cuda_error-nvcc-invalid-config",
        "nvml-epilog-snapshot", "nan_silent-torch"}
    for c in s["cases"]:  # the expected class beside the verdict gpualert gave
        assert {"expected", "verdict", "match", "status", "reason"} <= set(c), c
    assert s["counts"] == {"ran": 0, "skipped": len(s["cases"]), "failed-to-run": 0}


def test_skip_reasons_without_gpu(run):
    _, out = run
    s = json.loads((out / "summary.json").read_text())
    for c in s["cases"]:
        assert c["status"] == "skipped", c
        if c["case"] == "gpu_hardware":
            assert c["reason"].startswith("composed, not runnable:") and c["composed"] is True
        else:
            assert c["reason"].startswith("no GPU ("), c
            assert c["reason"] == f"no GPU ({s['no_gpu_reason']})"
            assert c["part"] == "cpu_half" and c["match"] is None


def test_per_case_layout(run):
    _, out = run
    mod = _reproduce_module()
    s = json.loads((out / "summary.json").read_text())
    top = json.loads((out / "versions.json").read_text())
    for c in s["cases"]:
        d = out / c["dir"]
        names = {p.name for p in d.iterdir()}
        assert json.loads((d / "versions.json").read_text()) == top
        assert json.loads((d / "case.json").read_text()) == c
        if c["case"] == "gpu_hardware":
            assert names == {"case.json", "versions.json"}
            continue
        assert set(mod.RUN_FILES) <= names, (c["case"], names)
        code = int((d / "exit_status").read_text())
        ex = json.loads((d / "exit.json").read_text())
        assert code == c["exit_status"] == ex["returncode"] == c["cpu_half_exit_status"] == 0
        assert json.loads((d / "run.json").read_text())["cmd"] == c["command"]
        verdict = json.loads((d / "verdict.json").read_text())
        assert verdict["class"] == c["verdict"]["class"]
        assert (d / "output.log").stat().st_size > 0 or c["command"][0].endswith("nvcc")


def test_versions_file(run):
    _, out = run
    v = json.loads((out / "versions.json").read_text())
    for k in VERSION_KEYS:
        assert k in v and v[k] not in (None, ""), k
    s = json.loads((out / "summary.json").read_text())
    assert s["versions"]["gpu_name"] == v["gpu_name"]
    if not v["gpu_present"]:
        assert v["gpu_name"] == v["driver"] == "absent"


def test_nvcc_case_cpu_half_is_the_build(run):
    _, out = run
    v = json.loads((out / "versions.json").read_text())
    c = json.loads((out / "cuda_error-nvcc-illegal-address" / "case.json").read_text())
    if v["nvcc"] == "absent":
        log = (out / "cuda_error-nvcc-illegal-address" / "output.log").read_text()
        assert log == "nvcc: absent here; this case's CPU half is its build (cases/oob.cu)\n"
    else:
        assert c["command"][0].endswith("nvcc") and c["command"][-1].endswith("cases/oob.cu")
        assert c["exit_status"] == 0


def test_nvml_absent_and_found_paths_share_the_schema(run):
    _, out = run
    rec = json.loads((out / "nvml-epilog-snapshot" / "nvml.json").read_text())
    assert rec["same_top_level_keys"] is True
    assert rec["keys"]["as_found"] == rec["keys"]["nvml_hidden"] == [
        "absent", "after", "before", "changed"]
    assert rec["nvml_hidden"]["absent"].startswith("unavailable: nvidia-ml-py not installed")
    log = (out / "nvml-epilog-snapshot" / "output.log").read_text()
    assert "top-level keys" in log and ": same" in log


def test_to_corpus_writes_nothing_without_a_gpu(run, tmp_path):
    _, out = run
    r = subprocess.run([sys.executable, str(GPU_DIR / "to_corpus.py"), str(out),
                        "--set", str(tmp_path / "set"), "--write"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no case is written without a real run" in r.stderr
    assert not (tmp_path / "set").exists() and r.stdout == ""


def test_list_and_unknown_case():
    r = subprocess.run(["bash", str(GPU_DIR / "reproduce.sh"), "--list"],
                       env=dict(os.environ, PYTHON=sys.executable), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "gpu_hardware" in r.stdout and "composed" in r.stdout
    r = subprocess.run(["bash", str(GPU_DIR / "reproduce.sh"), "--only", "nope"],
                       env=dict(os.environ, PYTHON=sys.executable, OUT="/nonexistent"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown case(s): nope" in r.stderr


def test_a_case_past_its_timeout_is_stopped(tmp_path):
    """The per-case bound: SIGTERM through gpualert run (which forwards it), the log kept."""
    mod = _reproduce_module()
    d = tmp_path / "case"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = mod.run_logged(sys.executable, [sys.executable, "-c",
                                          "import time; print('started', flush=True); "
                                          "time.sleep(60)"], str(d), "t", env, 1.5)
    assert res["timed_out"] is True and res["elapsed_s"] < 15
    assert res["exit_status"] == 128 + 15 == int((d / "exit_status").read_text())
    assert json.loads((d / "exit.json").read_text())["signal"] == 15
    assert (d / "output.log").read_text() == "started\n"


def test_budget_spent_skips_with_a_reason(tmp_path):
    r = subprocess.run(["bash", str(GPU_DIR / "reproduce.sh"), "--budget", "0", "--only",
                        "cuda_oom-torch,gpu_hardware"],
                       env=dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    (oom, hw) = s["cases"]
    assert oom["status"] == "skipped" and oom["reason"].startswith("budget: ")
    assert hw["reason"].startswith("composed, not runnable")
