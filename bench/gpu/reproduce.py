#!/usr/bin/env python3
"""Real GPU failures under `gpualert run`, one call: `reproduce.py --out DIR [options]`.

On the device tool (OUT is set there, the project travels as the working tree, nothing is
installed; python3 there holds PyTorch, CuPy, JAX and nvidia-ml-py, and nvcc is on the PATH):

    run(command="bash bench/gpu/reproduce.sh", timeout_s=300)

The default --budget (240 s) leaves that call's rest for classifying and the transfer, and the
device time for a rerun. Each case runs its program (bench/gpu/cases/) under
`python3 -m gpualert_slurm run` from the checkout (PYTHONPATH=<repo>, no install), with its own
timeout, then `gpualert classify --json` on the log. Per case, $OUT/<case>/ holds:

    run.json, output.log, exit.json   gpualert run's log directory (the tap's guarantees)
    exit_status                       the exit status, one number (gpualert run's = the case's)
    verdict.json                      gpualert classify --json's output
    versions.json                     driver, CUDA, PyTorch, NCCL, GPU name, ... ('absent' if not)
    case.json                         the case: command, env, expected class, status, reason
    (+ build.log for the nvcc cases, nvml.json for the NVML case)

and $OUT/summary.json lists every case with its status (ran / skipped with a reason /
failed-to-run), the expected class and the verdict's class side by side. It is rewritten after
each case, so a call cut short still leaves one. gpu_hardware cannot be made on a healthy GPU:
it is listed, skipped as 'composed, not runnable', and has only case.json and versions.json.

Without a GPU (or with --no-gpu) each case runs its CPU half instead (its program with
--cpu-half: arguments, imports, a CPU variant where one exists; nvcc cases: the build), under
`gpualert run` all the same, and is recorded 'skipped: no GPU (why)'. The exit status is 0
whenever the summary was written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CASES = os.path.join(HERE, "cases")
DEVICE_COMMAND = "bash bench/gpu/reproduce.sh  (device tool: run, timeout_s=300)"
ABSENT = "absent"
KILL_GRACE_S = 10.0
CLASSIFY_TIMEOUT_S = 60.0
# Files every run case's directory holds (the unit test checks this list).
RUN_FILES = ("run.json", "output.log", "exit.json", "exit_status", "verdict.json",
             "versions.json", "case.json")


@dataclass
class Case:
    name: str
    expected: str            # the class the failure is: what gpualert should say
    needs: tuple[str, ...]   # torch, cupy, jax, nvcc
    gpu: list[str]           # the GPU run's argv ({py}, {cases}, {bin}, {dir} filled in)
    cpu: list[str] | None    # the CPU half's argv
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    exit: str = "nonzero"    # how the program ends when it fails as designed
    note: str = ""
    composed: str | None = None  # why it cannot be run (gpu_hardware)


def _py(script: str, *args: str) -> list[str]:
    return ["{py}", f"{{cases}}/{script}", *args]


def _torchrun(script: str, *args: str) -> list[str]:
    return ["{py}", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            f"{{cases}}/{script}", *args]


NVCC_BUILD = ["{nvcc}", "-Xptxas", "-v", "-o", "{bin}/oob", "{cases}/oob.cu"]  # -v: a line a kernel

# In order of what a short budget should keep: one case of each GPU-only class first.
CASE_LIST = [
    Case("cuda_oom-torch", "cuda_oom", ("torch",),
         _py("cuda_oom.py", "--framework", "torch"),
         _py("cuda_oom.py", "--framework", "torch", "--cpu-half"), 60),
    Case("cuda_device_assert-index", "cuda_device_assert", ("torch",),
         _py("device_assert.py", "--mode", "index"),
         _py("device_assert.py", "--mode", "index", "--cpu-half"), 45),
    Case("cuda_device_assert-index-blocking", "cuda_device_assert", ("torch",),
         _py("device_assert.py", "--mode", "index"),
         _py("device_assert.py", "--mode", "index", "--cpu-half"), 45,
         env={"CUDA_LAUNCH_BLOCKING": "1"}),
    Case("cuda_error-nvcc-illegal-address", "cuda_error", ("nvcc",),
         ["{bin}/oob", "illegal_address"], NVCC_BUILD, 30),
    Case("cuda_error-nvcc-invalid-config", "cuda_error", ("nvcc",),
         ["{bin}/oob", "invalid_config"], NVCC_BUILD, 30),
    Case("nccl_error-duplicate-gpu", "nccl_error", ("torch",),
         _torchrun("nccl.py", "--mode", "duplicate_gpu"),
         _py("nccl.py", "--mode", "duplicate_gpu", "--cpu-half"), 60,
         note="two ranks of one NCCL communicator on the one GPU (torchrun, 2 processes)"),
    Case("collective_timeout-nccl-stalled", "collective_timeout", ("torch",),
         _py("collective_timeout.py", "--mode", "nccl_stalled"),
         _py("collective_timeout.py", "--mode", "nccl_stalled", "--cpu-half"), 60,
         note="one GPU holds one NCCL rank: the stalled rank is a busy stream, timeout 3 s"),
    Case("nan_silent-torch", "nan_divergence", ("torch",),
         _py("nan_silent.py"), _py("nan_silent.py", "--cpu-half"), 45, exit="zero",
         note="silent: the loss turns NaN, the program logs it and exits 0"),
    Case("nvml-epilog-snapshot", "success", (),
         _py("nvml_snapshot.py", "--out", "{dir}/nvml.json"),
         _py("nvml_snapshot.py", "--out", "{dir}/nvml.json", "--cpu-half"), 60, exit="zero",
         note="core.gpu.gpu_snapshot (Prolog) before, core.evidence.nvml_evidence (node "
              "Epilog) after, and the Epilog's call with NVML hidden: nvml.json"),
    Case("cuda_error-cupy-illegal-address", "cuda_error", ("cupy",),
         _py("cupy_kernel.py", "--mode", "illegal_address"),
         _py("cupy_kernel.py", "--mode", "illegal_address", "--cpu-half"), 45),
    Case("cuda_error-cupy-invalid-config", "cuda_error", ("cupy",),
         _py("cupy_kernel.py", "--mode", "invalid_config"),
         _py("cupy_kernel.py", "--mode", "invalid_config", "--cpu-half"), 45),
    Case("cuda_oom-cupy", "cuda_oom", ("cupy",),
         _py("cuda_oom.py", "--framework", "cupy"),
         _py("cuda_oom.py", "--framework", "cupy", "--cpu-half"), 45),
    Case("cuda_oom-jax", "cuda_oom", ("jax",),
         _py("cuda_oom.py", "--framework", "jax"),
         _py("cuda_oom.py", "--framework", "jax", "--cpu-half"), 60),
    Case("cuda_device_assert-cross-entropy", "cuda_device_assert", ("torch",),
         _py("device_assert.py", "--mode", "cross_entropy"),
         _py("device_assert.py", "--mode", "cross_entropy", "--cpu-half"), 45),
    Case("collective_timeout-gloo-skip", "collective_timeout", ("torch",),
         _torchrun("collective_timeout.py", "--mode", "gloo_skip"),
         _py("collective_timeout.py", "--mode", "gloo_skip", "--cpu-half"), 45,
         note="rank 1 skips an all_reduce of CUDA tensors; gloo, timeout 5 s"),
    Case("nccl_error-abort", "nccl_error", ("torch",),
         _py("nccl.py", "--mode", "abort"), _py("nccl.py", "--mode", "abort", "--cpu-half"),
         45, note="the communicator aborted while an all_reduce is pending (world size 1)"),
    Case("gpu_hardware", "gpu_hardware", (), [], None, 0,
         composed="composed, not runnable: a healthy GPU cannot be made to raise an Xid, "
                  "an uncorrectable ECC error or fall off the bus; the corpus's gpu_hardware "
                  "cases stay composed from documented formats"),
]


# ---------------------------------------------------------------- what is installed


def _cmd(argv: list[str], timeout: float = 30.0, env: dict[str, str] | None = None,
         stdout_only: bool = False) -> tuple[int | None, str]:
    """(exit status or None when it could not run / timed out, stdout + stderr, or stdout
    alone when it ran and stdout_only)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return None, f"{argv[0]}: not found"
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{type(e).__name__}: {e}"
    if stdout_only and r.returncode == 0:
        return 0, r.stdout
    return r.returncode, r.stdout + r.stderr


PROBES = {
    "torch": r"""
import json, torch
d = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
     "cuda_available": torch.cuda.is_available()}
try:
    v = torch.cuda.nccl.version()
    d["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
except Exception as e:
    d["nccl_note"] = f"{type(e).__name__}: {e}"
if d["cuda_available"]:
    p = torch.cuda.get_device_properties(0)
    d.update(gpu_name=p.name, gpu_memory_bytes=p.total_memory,
             compute_capability=f"{p.major}.{p.minor}", gpu_count=torch.cuda.device_count())
print(json.dumps(d))
""",
    "cupy": r"""
import json, cupy
d = {"cupy": cupy.__version__}
try:
    d["cupy_cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    d["cupy_cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
except Exception as e:
    d["cupy_note"] = f"{type(e).__name__}: {e}"
print(json.dumps(d))
""",
    "jax": r"""
import json, jax
d = {"jax": jax.__version__}
try:
    import jaxlib
    d["jaxlib"] = jaxlib.__version__
    d["jax_devices"] = [f"{x.platform}:{x.device_kind}" for x in jax.devices()]
except Exception as e:
    d["jax_note"] = f"{type(e).__name__}: {e}"
print(json.dumps(d))
""",
    "nvml": r"""
import json
from gpualert_slurm.core.gpu import gpu_snapshot
s = gpu_snapshot()
if isinstance(s, str):
    print(json.dumps({"nvml": s}))
else:
    print(json.dumps({"nvml": "present", "nvml_driver": s.get("driver"),
                      "nvml_gpus": [d.get("name") for d in s.get("devices", [])]}))
""",
}


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None)


def probe_versions(py: str, env: dict[str, str]) -> dict[str, Any]:
    """Driver, CUDA, PyTorch, NCCL, GPU name and the frameworks: each found value, or
    'absent' (why, in notes)."""
    found: dict[str, Any] = {}
    notes: dict[str, str] = {}
    code, out = _cmd(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pci.bus_id",
                      "--format=csv,noheader"], 30)
    if code == 0 and out.strip():
        rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines()]
        found["smi_gpus"] = [r[0] for r in rows]
        found["smi_driver"] = rows[0][1] if len(rows[0]) > 1 else ABSENT
        found["smi_memory"] = rows[0][2] if len(rows[0]) > 2 else ABSENT
        code2, out2 = _cmd(["nvidia-smi"], 30)
        m = re.search(r"CUDA Version:\s*([\d.]+)", out2 or "")
        if m:
            found["smi_cuda"] = m.group(1)
    else:
        line = (out.strip().splitlines() or ["no output"])[-1][:200]
        notes["nvidia-smi"] = line if line.startswith("nvidia-smi") else f"nvidia-smi: {line}"
    nvcc = find_nvcc()
    if nvcc:
        code, out = _cmd([nvcc, "--version"], 30)
        m = re.search(r"release ([\d.]+), (V[\w.]+)", out)
        found["nvcc"] = f"{m.group(1)} ({m.group(2)})" if m else out.strip()[-100:]
    else:
        notes["nvcc"] = "not on the PATH"
    for name, src in PROBES.items():
        penv = dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
        code, out = _cmd([py, "-c", src], 90, penv, stdout_only=True)
        last = (out.strip().splitlines() or [""])[-1]
        try:
            got = json.loads(last) if code == 0 else None
        except ValueError:
            got = None
        if isinstance(got, dict):
            found.update(got)
        else:
            notes[name] = last[:300] or "no output"
    gpu_names = found.get("smi_gpus") or ([found["gpu_name"]] if found.get("gpu_name") else
                                          found.get("nvml_gpus") or [])
    v = {
        "gpu_name": gpu_names[0] if gpu_names else ABSENT,
        "gpu_count": len(gpu_names),
        "driver": found.get("smi_driver") or found.get("nvml_driver") or ABSENT,
        "cuda_driver_api": found.get("smi_cuda", ABSENT),
        "cuda_runtime_torch": found.get("torch_cuda") or ABSENT,
        "nvcc": found.get("nvcc", ABSENT),
        "torch": found.get("torch", ABSENT),
        "nccl": found.get("nccl", ABSENT),
        "cupy": found.get("cupy", ABSENT),
        "jax": found.get("jax", ABSENT),
        "jaxlib": found.get("jaxlib", ABSENT),
        "nvml": found.get("nvml", ABSENT),
        "python": sys.version.split()[0] if py == sys.executable else
        (_cmd([py, "-c", "import sys; print(sys.version.split()[0])"])[1].strip() or ABSENT),
        "kernel": os.uname().release,
        "host": socket.gethostname(),
        "details": dict(found),
        "notes": notes,
    }
    v["gpu_present"] = bool(gpu_names) or found.get("cuda_available") is True
    return v


def no_gpu_reason(v: dict[str, Any]) -> str:
    n = v["notes"]
    parts = [n.get("nvidia-smi", "nvidia-smi: lists no GPU"),
             "torch: " + ("absent" if v["torch"] == ABSENT else "sees no CUDA device"),
             f"NVML: {v['nvml']}"]
    return "; ".join(parts)


def project_imports(py: str, env: dict[str, str]) -> str:
    """'ok', or why the checkout's package does not import with what this python has."""
    code, out = _cmd([py, "-c", "import gpualert_slurm.cli, gpualert_slurm.commands.run, "
                      "gpualert_slurm.commands.classify, gpualert_slurm.core.evidence; "
                      "from gpualert_slurm.classify import load_rules; load_rules(); print('ok')"],
                     120, env)
    return "ok" if code == 0 and out.strip().endswith("ok") else (out.strip()[-500:] or
                                                                  f"exit {code}")


# ---------------------------------------------------------------- running one case


def fill(argv: list[str], subst: dict[str, str]) -> list[str]:
    return [a.format(**subst) for a in argv]


def run_logged(py: str, argv: list[str], d: str, name: str, env: dict[str, str],
               timeout: float) -> dict[str, Any]:
    """argv under `gpualert run --log-dir d`; on timeout SIGTERM (gpualert run forwards it),
    then SIGKILL to the whole session."""
    cmd = [py, "-m", "gpualert_slurm", "run", "--log-dir", d, "--name", name, "--", *argv]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env, cwd=REPO, start_new_session=True)
    timed_out = False
    try:
        code = p.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 30.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
            try:
                p.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        code = p.returncode
    with open(os.path.join(d, "exit_status"), "w") as f:
        f.write(f"{code}\n")
    return {"exit_status": code, "timed_out": timed_out,
            "elapsed_s": round(time.monotonic() - t0, 2)}


def classify(py: str, d: str, env: dict[str, str]) -> dict[str, Any] | None:
    log = os.path.join(d, "output.log")
    if not os.path.exists(log):
        return None
    code, out = _cmd([py, "-m", "gpualert_slurm", "classify", "--json", log],
                     CLASSIFY_TIMEOUT_S, env)
    try:
        verdict = json.loads(out.strip().splitlines()[-1]) if code == 0 else None
    except (ValueError, IndexError):
        verdict = None
    if verdict is None:
        with open(os.path.join(d, "classify.stderr"), "w") as f:
            f.write(out)
        return None
    with open(os.path.join(d, "verdict.json"), "w") as f:
        json.dump(verdict, f, indent=1)
        f.write("\n")
    return verdict


def build_nvcc(nvcc: str, bin_dir: str, out_dir: str) -> tuple[bool, str]:
    """Builds cases/oob.cu once; its output goes to OUT/_build/nvcc.log."""
    os.makedirs(out_dir, exist_ok=True)
    argv = fill(NVCC_BUILD, {"nvcc": nvcc, "bin": bin_dir, "cases": CASES})
    code, out = _cmd(argv, 180)
    with open(os.path.join(out_dir, "nvcc.log"), "w") as f:
        f.write(f"$ {' '.join(argv)}\n{out}exit {code}\n")
    return code == 0, out.strip()[-300:]


def short(verdict: dict[str, Any] | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {k: verdict.get(k) for k in ("class", "confidence", "decided_by", "detail",
                                        "silent_failure")}


# ---------------------------------------------------------------- the run


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT"),
                   help="where the results go (default: $OUT)")
    p.add_argument("--budget", type=float, default=240.0,
                   help="seconds for the whole run; a case starts only while its time fits "
                        "(default 240: the device call's timeout_s=300 less classifying)")
    p.add_argument("--only", help="comma-separated case names (a rerun of a few)")
    p.add_argument("--no-gpu", action="store_true",
                   help="run every case's CPU half even where a GPU is present")
    p.add_argument("--python", default=sys.executable,
                   help="the Python that runs the cases (default: this one)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    cases = CASE_LIST
    if a.only:
        want = {x.strip() for x in a.only.split(",") if x.strip()}
        unknown = want - {c.name for c in CASE_LIST}
        if unknown:
            print(f"reproduce: unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        cases = [c for c in CASE_LIST if c.name in want]
    if a.list:
        for c in cases:
            print(f"{c.name:36s} expected {c.expected:20s} needs {','.join(c.needs) or '-'}"
                  + (f"  ({c.composed.split(':')[0]})" if c.composed else ""))
        return 0
    if not a.out:
        print("reproduce: no --out and no $OUT", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    py = a.python
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("CUDA_LAUNCH_BLOCKING", None)  # only the -blocking case sets it
    env["GPUALERT_RULES_CACHE_DIR"] = "off"  # root there: leave no rule cache in /var/cache

    print(f"reproduce: probing versions with {py}", flush=True)
    versions = probe_versions(py, env)
    imports = project_imports(py, env)
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1, sort_keys=True)
    gpu = versions["gpu_present"] and not a.no_gpu
    why_not = ("--no-gpu given" if a.no_gpu and versions["gpu_present"]
               else no_gpu_reason(versions))
    print(f"reproduce: GPU {versions['gpu_name']} (driver {versions['driver']}, torch "
          f"{versions['torch']}, NCCL {versions['nccl']}); "
          + ("running the GPU cases" if gpu else f"no GPU: CPU halves only ({why_not})"),
          flush=True)
    summary: dict[str, Any] = {
        "command": " ".join([os.path.relpath(__file__, REPO)] + (argv or sys.argv[1:])),
        "device_command": DEVICE_COMMAND, "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "budget_s": a.budget,
        "gpu_present": versions["gpu_present"], "gpu_used": gpu, "no_gpu_reason":
        None if gpu else why_not, "gpu_name": versions["gpu_name"], "project_import": imports,
        "versions": {k: v for k, v in versions.items() if k not in ("details", "notes")},
        "complete": False, "cases": [],
    }

    ctx = Ctx(out=out, py=py, env=env, gpu=gpu, why_not=why_not, imports=imports,
              versions=versions, nvcc=find_nvcc(), bin=tempfile.mkdtemp(prefix="gpualert-gpu-"),
              deadline=t_start + a.budget)
    try:
        for case in cases:
            rec = run_one(case, ctx)
            summary["cases"].append(rec)
            write_summary(out, summary)
            v = (rec.get("verdict") or {}).get("class")
            print(f"  {case.name:36s} {rec['status']:13s} expected {case.expected:19s} "
                  f"verdict {v or '-':19s} {(rec['reason'] or '')[:60]}", flush=True)
    finally:
        shutil.rmtree(ctx.bin, ignore_errors=True)
    summary["complete"] = True
    summary["elapsed_s"] = round(time.monotonic() - t_start, 1)
    ran = [c for c in summary["cases"] if c["status"] == "ran"]
    summary["counts"] = {s: sum(c["status"] == s for c in summary["cases"])
                         for s in ("ran", "skipped", "failed-to-run")}
    summary["right"] = sum(bool(c["match"]) for c in ran)
    write_summary(out, summary)
    print(f"reproduce: {summary['counts']}, verdict = expected in {summary['right']} of "
          f"{len(ran)} run; {summary['elapsed_s']} s; results in {out}", flush=True)
    return 0


def write_summary(out: str, summary: dict[str, Any]) -> None:
    tmp = os.path.join(out, ".summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "summary.json"))


@dataclass
class Ctx:
    """What every case of one run shares."""
    out: str
    py: str
    env: dict[str, str]
    gpu: bool                # run the GPU parts
    why_not: str             # else why not
    imports: str             # 'ok' or why the checkout does not import
    versions: dict[str, Any]
    nvcc: str | None
    bin: str                 # a temporary directory for the nvcc build
    deadline: float          # time.monotonic() at which the budget ends
    built: tuple[bool, str] | None = None  # the nvcc build's result, once tried

    def left(self) -> float:
        return self.deadline - time.monotonic()


def run_one(case: Case, ctx: Ctx) -> dict[str, Any]:
    out, py, env, gpu, nvcc = ctx.out, ctx.py, ctx.env, ctx.gpu, ctx.nvcc
    d = os.path.join(out, case.name)
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(os.path.join(out, "versions.json"), os.path.join(d, "versions.json"))
    rec: dict[str, Any] = {
        "case": case.name, "expected": case.expected, "status": None, "reason": None,
        "part": None, "command": None, "env": case.env, "timeout_s": case.timeout_s,
        "expected_exit": case.exit, "note": case.note, "exit_status": None,
        "timed_out": False, "elapsed_s": None, "verdict": None, "match": None,
        "dir": case.name,
    }
    versions = ctx.versions
    have = {"torch": versions["torch"] != ABSENT, "cupy": versions["cupy"] != ABSENT,
            "jax": versions["jax"] != ABSENT, "nvcc": nvcc is not None}
    missing = [n for n in case.needs if not have[n]]
    subst = {"py": py, "cases": CASES, "bin": ctx.bin, "dir": d, "nvcc": nvcc or "nvcc"}

    def finish() -> dict[str, Any]:
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        return rec

    if case.composed:
        rec.update(status="skipped", reason=case.composed, composed=True)
        return finish()
    if ctx.imports != "ok":
        rec.update(status="failed-to-run", reason=f"the project does not import: {ctx.imports}")
        return finish()
    run_gpu = gpu and not missing
    if run_gpu:
        part, argv = "gpu", case.gpu
        rec["status"] = "ran"
    else:
        part, argv = "cpu_half", case.cpu or []
        rec["status"] = "skipped"
        rec["reason"] = (f"no GPU ({ctx.why_not})" if not gpu
                         else f"{', '.join(missing)} absent here")
        if "nvcc" in case.needs and nvcc is None:  # the CPU half of an nvcc case is the build
            argv = ["{py}", "-c", "print('nvcc: absent here; this case\\'s CPU half is its "
                    "build (cases/oob.cu)')"]
    timeout = min(case.timeout_s, ctx.left() - CLASSIFY_TIMEOUT_S / 4)
    if timeout < min(case.timeout_s, 15.0):
        rec.update(status="skipped", reason=f"budget: {max(0.0, ctx.left()):.0f} s left, the "
                   f"case needs up to {case.timeout_s:.0f} s")
        return finish()
    if run_gpu and "nvcc" in case.needs:
        if ctx.built is None:
            ctx.built = build_nvcc(nvcc or "nvcc", ctx.bin, os.path.join(out, "_build"))
        shutil.copyfile(os.path.join(out, "_build", "nvcc.log"), os.path.join(d, "build.log"))
        if not ctx.built[0]:
            rec.update(status="failed-to-run", reason=f"nvcc build failed: {ctx.built[1]}")
            return finish()
        timeout = min(case.timeout_s, ctx.left() - CLASSIFY_TIMEOUT_S / 4)
    cmd = fill(argv, subst)
    run_env = dict(env, **case.env)
    rec.update(part=part, command=cmd)
    try:
        res = run_logged(py, cmd, d, case.name, run_env, timeout)
    except OSError as e:
        rec.update(status="failed-to-run", reason=f"cannot start gpualert run: {e}")
        return finish()
    rec.update(res)
    verdict = classify(py, d, env)
    rec["verdict"] = short(verdict)
    if part == "gpu":
        rec["match"] = bool(verdict) and verdict.get("class") == case.expected
        rec["failed_as_designed"] = (res["exit_status"] != 0) == (case.exit == "nonzero")
        if res["timed_out"]:
            rec.update(status="failed-to-run", reason=f"timed out after {timeout:.0f} s "
                       "(killed: the failure did not end the program in time)")
        elif res["exit_status"] in (126, 127) and _exec_error(d):
            rec.update(status="failed-to-run", reason=_exec_error(d))
    else:
        rec["cpu_half_exit_status"] = res["exit_status"]
    return finish()


def _exec_error(d: str) -> str | None:
    try:
        with open(os.path.join(d, "exit.json")) as f:
            return json.load(f).get("exec_error")
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    sys.exit(main())
