"""Build corpus/realworld/: a small tuning set for the kinds of input real logs have (issue 10).

Three kinds of case, each labelled with how it was made (corpus format, docs/CLASSIFY-API.md):
- reproduced: the failure really ran here (CPU; frameworks from /opt/gpualert-corpus-venv);
- reproduced + "transform": a really-run log rewritten into a shape people's logs have (CRLF,
  "> " quoting, Markdown, launcher prefixes, timestamps, Windows paths, a cut-off tail); the
  transform is recorded in the label;
- synthetic: composed by hand from a documented format (Slurm's, the kernel's, NCCL's, a
  launcher's) where the failure cannot run here (no GPU, no InfiniBand, no second node); "how"
  says so. corpus/realworld/README.md lists the formats and where they were read.

Usage: python corpus/realworld/make.py [--only ID_PREFIX]   (about 3 minutes; rewrites the set)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
FW = "/opt/gpualert-corpus-venv/bin/python"  # torch, tensorflow, jax, lightning (CPU builds)
PY = sys.executable


def run(cmd: list[str], cwd: str, timeout: int = 300, env: dict | None = None) -> tuple[bytes, int]:
    e = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="0", **(env or {}))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd,
                       timeout=timeout, env=e)
    return p.stdout, p.returncode


def prog(cwd: str, code: str, name: str = "train.py") -> str:
    path = os.path.join(cwd, name)
    Path(path).write_text(textwrap.dedent(code))
    return path


# ---- really-run failures -------------------------------------------------------------------

REAL: dict[str, tuple[str, str, list[str] | None]] = {
    # id: (class, program, interpreter args)   the program's output is the log
    "rw-nan-abort-exit0": ("nan_divergence", """
        import math, sys
        w, lr = 1.0, 3.5  # gradient descent on w**4 with a step far too large: it diverges
        for step in range(1, 40):
            loss = w * w * w * w  # floats overflow to inf here, not to an exception
            print(f"step {step:4d} | loss = {loss:.4g} | lr {lr}")
            if not math.isfinite(loss):
                print("non-finite loss detected, stopping training early")
                sys.exit(0)
            w -= lr * 4 * w * w * w
        """, None),
    "rw-nan-count-benign": ("success", """
        import random
        random.seed(1)
        for step in range(1, 300):
            print(f"step {step} loss {2.0 / step:.4f} nan_count 0 inf_count 0 skipped 0")
        print("training finished: 0 errors, checkpoint saved")
        """, None),
    "rw-nan-recovered": ("success", """
        for step in range(1, 200):
            if step == 7:
                print(f"step {step} loss = nan, skipping step (grad scaler)")
                continue
            print(f"step {step} loss = {1.0 / step:.4f}")
        print("done")
        """, None),
    "rw-warning-as-error": ("python_exception", """
        import warnings
        def load(path):
            warnings.warn("load() without weights_only is deprecated", DeprecationWarning)
        print("loading model")
        load("model.pt")
        """, ["-W", "error::DeprecationWarning"]),
    "rw-memoryerror": ("host_oom", "buf = bytearray(1 << 60)\n", None),
    "rw-import": ("import_error", "import apex_amp_not_installed_here\n", None),
    "rw-fnf": ("file_not_found", "open('/data/imagenet/train/shard-0001.tar', 'rb')\n", None),
    "rw-perm": ("permission_denied", "open('/proc/1/mem', 'rb').read(1)\n", None),
    "rw-keyerror": ("python_exception", "cfg = {'lr': 1e-3}\nprint(cfg['batch_size'])\n", None),
    "rw-segv": ("segfault", "import ctypes\nprint('step 1', flush=True)\nctypes.string_at(0)\n",
                ["-X", "faulthandler"]),
}

# frameworks, really run on the CPU
FRAMEWORK: dict[str, tuple[str, str]] = {
    "rw-tf-cpu-oom": ("host_oom", """
        import tensorflow as tf
        x = tf.ones([1 << 20, 1 << 20])  # 4 TiB on the CPU device
        print(tf.reduce_sum(x))
        """),
    "rw-tf-check-numerics": ("nan_divergence", """
        import tensorflow as tf
        loss = tf.math.log(tf.constant([-1.0]))  # nan
        tf.debugging.check_numerics(loss, "loss")
        """),
    "rw-keras-terminate-on-nan": ("nan_divergence", """
        import numpy as np, tensorflow as tf
        x = np.random.rand(64, 4).astype("float32"); y = np.random.rand(64, 1).astype("float32")
        m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        m.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=1e30), loss="mse")
        m.fit(x * 1e20, y, epochs=3, batch_size=8, verbose=2,
              callbacks=[tf.keras.callbacks.TerminateOnNaN()])
        print("fit returned")
        """),
    "rw-jax-debug-nans": ("nan_divergence", """
        import jax, jax.numpy as jnp
        jax.config.update("jax_debug_nans", True)
        def loss(w):
            return jnp.log(w - 2.0)
        print(jax.jit(loss)(jnp.float32(1.0)))
        """),
    "rw-lightning-nan-stop": ("nan_divergence", """
        import torch, lightning as L
        from torch.utils.data import DataLoader, TensorDataset
        class M(L.LightningModule):
            def __init__(self):
                super().__init__(); self.l = torch.nn.Linear(2, 1)
            def training_step(self, b, i):
                return self.l(b[0]).mean()
            def validation_step(self, b, i):
                self.log("val_loss", torch.tensor(float("nan")))
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)
        ds = TensorDataset(torch.randn(16, 2))
        t = L.Trainer(max_epochs=5, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False,
                      callbacks=[L.pytorch.callbacks.EarlyStopping("val_loss", check_finite=True,
                                                                  verbose=True)])
        t.fit(M(), DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=4))
        print("trainer finished")
        """),
}

TORCHRUN = """
import os, signal, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
if rank == int(os.environ["FAIL_RANK"]):
    time.sleep(0.5)
    if os.environ["HOW"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"bad shard index {rank * 7} for 4 shards")
time.sleep(30)
"""


def real_cases(work: str) -> list[dict]:
    out = []
    for cid, (cls, code, args) in REAL.items():
        path = prog(work, code)
        log, rc = run([PY, *(args or []), path], work)
        out.append(case(cid, cls, log, rc, f"python {' '.join(args or [])} <program>".strip(),
                        program=code))
    # a bare "Killed": bash reports a child it lost to SIGKILL
    log, rc = run(["bash", "-c", f"{PY} -c 'import os; print(\"step 1\", flush=True); "
                   "os.kill(os.getpid(), 9)'; exit $?"], work)
    out.append(case("rw-bare-killed", "killed", log, rc, "bash: a child killed by SIGKILL"))
    # the same, glued onto a tqdm bar that ended with "\r" (no newline)
    code = ("import os, time, tqdm\nfor i in tqdm.tqdm(range(100), mininterval=0):\n"
            "    time.sleep(0.002)\n    if i == 60: os.kill(os.getpid(), 9)\n")
    path = prog(work, code)
    log, rc = run(["bash", "-c", f"{FW} {path}; exit $?"], work)
    out.append(case("rw-killed-after-tqdm", "killed", log, rc,
                    "bash: tqdm bar, then SIGKILL", program=code))
    for cid, (cls, code) in FRAMEWORK.items():
        path = prog(work, code)
        log, rc = run([FW, path], work, timeout=600)
        out.append(case(cid, cls, log, rc, "corpus venv python <program>", program=code))
    # torchrun with two local ranks: one raises / is killed; its summary names the root cause
    path = prog(work, TORCHRUN)
    for cid, how, cls, tee in (("rw-torchrun-raise", "raise", "python_exception", False),
                               ("rw-torchrun-kill9", "kill", "killed", False),
                               ("rw-torchrun-tee-raise", "raise", "python_exception", True)):
        cmd = [FW, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29611"]
        cmd += ["--tee", "3"] if tee else []
        log, rc = run([*cmd, path], work, env={"FAIL_RANK": "1", "HOW": how})
        out.append(case(cid, cls, log, rc, " ".join(cmd[1:]) + " <program>", program=TORCHRUN,
                        root_rank=1))
    return out


def case(cid: str, cls: str, log: bytes, rc: int, command: str, program: str | None = None,
         root_rank: int | None = None, source: str = "reproduced", how: str | None = None,
         transform: str | None = None, extra: dict | None = None) -> dict:
    # a negative status: killed by that signal; bash's 128+N stays an exit code (the job's)
    code, sig = (None, -rc) if rc < 0 else (rc, None)
    lab = {"id": cid, "class": cls, "root_rank": root_rank, "source": source,
           "command": command, "how": how, "exit_code": code, "signal": sig,
           "slurm_state": None, "slurm_reason": None, "hang_threshold_s": None,
           "silence_s": None, "kernel_log": None,
           "tasks": [{"log": f"cases/{cid}/run.0.log", "rank": 0, "node": None, "step": "run",
                      "exit_code": code, "signal": sig,
                      "core_dumped": False, "end_time": None}]}
    if transform:
        lab["transform"] = transform
    lab.update(extra or {})
    lab["_logs"] = {"run.0.log": log}
    if program:
        lab["_program"] = program
    return lab


# ---- shapes: really-run logs rewritten the way people's logs come ---------------------------

def _lines(b: bytes) -> list[bytes]:
    return b.splitlines()


SHAPES = {
    "crlf": lambda b: b.replace(b"\n", b"\r\n"),
    "quoted": lambda b: b"".join(b"> " + ln + b"\n" for ln in _lines(b)),
    "markdown": lambda b: b"**Error when training:**\n```python\n" + b + b"```\n",
    "indented": lambda b: b"".join(b"    " + ln + b"\n" for ln in _lines(b)),
    "srun-label": lambda b: b"".join(b"0: " + ln + b"\n" for ln in _lines(b)),
    "rank-prefix": lambda b: b"".join(b"[rank3]: " + ln + b"\n" for ln in _lines(b)),
    "host-prefix": lambda b: b"".join(b"gpu041: " + ln + b"\n" for ln in _lines(b)),
    "timestamps": lambda b: b"".join(b"2026-11-29 10:%02d:%02d,123 " % (i // 60 % 60, i % 60)
                                     + ln + b"\n" for i, ln in enumerate(_lines(b))),
    "windows-paths": lambda b: b.replace(b"/", b"\\").replace(b"\\tmp\\", b"C:\\Users\\me\\"),
    "cut-tail": lambda b: b[:-1] if b.endswith(b"\n") else b,  # the last line never ended
}
SHAPE_BASES = ["rw-import", "rw-fnf", "rw-memoryerror", "rw-warning-as-error", "rw-segv",
               "rw-bare-killed"]


def shape_cases(reals: dict[str, dict]) -> list[dict]:
    out = []
    for base in SHAPE_BASES:
        src = reals[base]
        for name, fn in SHAPES.items():
            c = json.loads(json.dumps({k: v for k, v in src.items() if not k.startswith("_")}))
            c["id"] = f"{base}-{name}"
            c["transform"] = name
            c["command"] = f"{src['command']}; then the '{name}' transform of make.py"
            c["tasks"][0]["log"] = f"cases/{c['id']}/run.0.log"
            c["_logs"] = {"run.0.log": fn(src["_logs"]["run.0.log"])}
            out.append(c)
    return out


# ---- synthetic: documented formats of things that cannot run here ---------------------------

def syn(cid: str, cls: str, how: str, logs: dict[str, str], exit_code: int | None = 1,
        signal: int | None = None, root_rank: int | None = None, tasks: list[dict] | None = None,
        **facts) -> dict:
    lab = {"id": cid, "class": cls, "root_rank": root_rank, "source": "synthetic",
           "command": None, "how": how, "exit_code": exit_code, "signal": signal,
           "slurm_state": None, "slurm_reason": None, "hang_threshold_s": None,
           "silence_s": None, "kernel_log": None}
    lab.update(facts)
    lab["tasks"] = tasks or [{"log": f"cases/{cid}/{name}", "rank": 0, "node": "n1",
                              "step": "0", "exit_code": exit_code, "signal": signal,
                              "core_dumped": False, "end_time": None} for name in logs]
    lab["_logs"] = {k: v.encode() for k, v in logs.items()}
    return lab


def t(cid: str, name: str, rank: int, node: str, step: str, exit_code: int | None,
      signal: int | None, end: float) -> dict:
    return {"log": f"cases/{cid}/{name}", "rank": rank, "node": node, "step": step,
            "exit_code": exit_code, "signal": signal, "core_dumped": False, "end_time": end}


STEPS = "".join(f"step {i} loss {3.0 / i:.3f} lr 1.0e-04\n" for i in range(1, 40))
SCALE = "".join(f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to "
                f"{65536.0 / 2 ** i}\n" for i in range(1, 24))


def synthetic_cases() -> list[dict]:
    c = []
    c.append(syn("rs-kernel-oom-in-log", "host_oom",
                 "a container that prints the kernel log after its child was killed: dmesg's "
                 "OOM-killer lines (format of mm/oom_kill.c) inside the task log, then bash's "
                 "report", {"0.0.log": STEPS + "[ 8812.402113] Out of memory: Killed process "
                            "40961 (python) total-vm:91234560kB, anon-rss:88123456kB\n"
                            "/var/spool/slurmd/job77/slurm_script: line 9: 40961 Killed"
                            "                  python train.py\n"}, exit_code=137))
    c.append(syn("rs-cgroup-oom-in-log", "host_oom",
                 "slurmstepd's cgroup OOM message forwarded into the task's stderr (Slurm 23)",
                 {"0.0.log": STEPS + "slurmstepd: error: Detected 1 oom_kill event in "
                  "StepId=77.0. Some of the step tasks have been OOM Killed.\n"}, exit_code=137))
    c.append(syn("rs-xid-in-log", "gpu_hardware",
                 "NVRM Xid 79 (documented in NVIDIA's Xid catalogue) printed by a container "
                 "before the CUDA error",
                 {"0.0.log": STEPS + "[ 912.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU "
                  "has fallen off the bus.\nRuntimeError: CUDA error: unspecified launch "
                  "failure\n"}))
    c.append(syn("rs-time-limit-in-log", "time_limit",
                 "slurmstepd's time-limit line inside a task log, no Slurm state given",
                 {"0.0.log": STEPS + "slurmstepd: error: *** STEP 88.0 ON n1 CANCELLED AT "
                  "2026-11-29T10:00:00 DUE TO TIME LIMIT ***\n"}, exit_code=None, signal=15))
    c.append(syn("rs-raise-then-time-limit", "python_exception",
                 "a rank raised and its job then sat until the time limit: the exception comes "
                 "shortly before Slurm's line in the same log",
                 {"0.0.log": STEPS + "Traceback (most recent call last):\n  File \"train.py\", "
                  "line 40, in <module>\n    step(batch)\nKeyError: 'input_ids'\nslurmstepd: "
                  "error: *** JOB 89 ON n1 CANCELLED AT 2026-11-29T12:00:00 DUE TO TIME LIMIT "
                  "***\n"}, exit_code=None, signal=15, slurm_state="TIMEOUT"))
    c.append(syn("rs-preempt-in-log", "preempted", "Slurm's preemption line in a task log",
                 {"0.0.log": STEPS + "slurmstepd: error: *** JOB 90 ON n2 CANCELLED AT "
                  "2026-11-29T10:00:00 DUE TO PREEMPTION ***\n"}, exit_code=None, signal=15))
    c.append(syn("rs-submitit-preempted", "preempted",
                 "submitit's messages on Slurm's warning signal (format read in submitit's "
                 "pull requests 1618/1701)", {"0.0.log": STEPS + "submitit WARNING (2026-11-29 "
                  "10:00:01,100) - Bypassing signal SIGTERM\nsubmitit INFO (2026-11-29 10:00:01,"
                  "200) - Job has not timed out. Ran 12 minutes out of requested 240 minutes.\n"
                  "submitit WARNING (2026-11-29 10:00:01,200) - Caught signal SIGUSR2 on n4: "
                  "this job is preempted.\nsubmitit INFO (2026-11-29 10:00:01,300) - Requeued "
                  "job 91 (3 remaining timeouts)\n"}, exit_code=None, signal=15))
    c.append(syn("rs-submitit-timed-out", "time_limit", "submitit's timed-out message",
                 {"0.0.log": STEPS + "submitit INFO (2026-11-29 14:00:00,100) - Job has timed "
                  "out. Ran 238 minutes out of requested 240 minutes.\nsubmitit WARNING "
                  "(2026-11-29 14:00:00,100) - Caught signal SIGUSR2 on n4: this job is "
                  "timed-out.\n"}, exit_code=None, signal=15))
    c.append(syn("rs-nccl-ib-completion", "nccl_error",
                 "NCCL_DEBUG=INFO output where an InfiniBand completion fails (NCCL WARN format "
                 "of net_ib.cc, read in NVIDIA/nccl issues)",
                 {"0.0.log": "".join(f"n1:3468:3905 [{g}] NCCL INFO Channel {c:02d}/16 : "
                                     f"0[{g}] -> 1[{g}] via NET/IB/0\n"
                                     for g in range(4) for c in range(8))
                  + STEPS + "n1:3468:3905 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
                  "completion from peer 10.1.2.3<50412> with status=12 opcode=0 len=0 vendor err "
                  "129 (Recv) localGid ::ffff:10.1.2.2 remoteGids::ffff:10.1.2.3\n"
                  "n1:3468:3905 [2] NCCL INFO transport/net.cc:1302 -> 6\n"}))
    c.append(syn("rs-nccl-unhandled-system", "nccl_error",
                 "ProcessGroupNCCL's error for ncclSystemError with NCCL_DEBUG=INFO lines before",
                 {"0.0.log": "".join(f"n2:771:771 [0] NCCL INFO comm 0x55d{i:03x} rank {i} "
                                     "nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE\n"
                                     for i in range(8))
                  + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                  "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
                  "2.19.3\n"}))
    c.append(syn("rs-apex-scale-collapse", "nan_divergence",
                 "apex/AMP dynamic loss scaling halving at every step until the scale is tiny "
                 "(message format of apex's LossScaler)", {"0.0.log": STEPS + SCALE},
                 exit_code=1))
    c.append(syn("rs-apex-scale-warmup-ok", "success",
                 "the same messages during warm-up (scale stays large), then training goes on",
                 {"0.0.log": "".join(f"Gradient overflow.  Skipping step, loss scaler 0 reducing "
                                     f"loss scale to {65536.0 / 2 ** i}\n" for i in range(1, 4))
                  + STEPS * 3 + "training complete\n"}, exit_code=0))
    c.append(syn("rs-deepspeed-min-scale", "nan_divergence",
                 "DeepSpeed's fp16 optimizer at its minimum loss scale (format of deepspeed's "
                 "loss_scaler.py)", {"0.0.log": STEPS + "".join(
                     f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {2 ** i}"
                     f", reducing to {2 ** (i - 1)}\n" for i in range(8, 0, -1))
                  + "Exception: Current loss scale already at minimum - cannot decrease scale "
                  "anymore. Exiting run.\n"}))
    c.append(syn("rs-hf-trainer-nan-exit0", "nan_divergence",
                 "Hugging Face Trainer's log dicts with the loss gone nan; the script exits 0",
                 {"0.0.log": "".join(f"{{'loss': {2.1 / i:.4f}, 'grad_norm': 1.3, "
                                     f"'learning_rate': 5e-05, 'epoch': {i / 10}}}\n"
                                     for i in range(1, 6))
                  + "{'loss': nan, 'grad_norm': nan, 'learning_rate': 5e-05, 'epoch': 0.6}\n"
                  "{'loss': nan, 'grad_norm': nan, 'learning_rate': 5e-05, 'epoch': 0.7}\n"
                  "{'train_runtime': 81.2, 'train_samples_per_second': 98.1, 'train_loss': nan, "
                  "'epoch': 0.7}\n"}, exit_code=0))
    c.append(syn("rs-ray-node-dead", "node_failure",
                 "Ray's GCS message when a node stops heartbeating (read in ray-project/ray "
                 "issues)", {"0.0.log": STEPS + "2026-11-29 10:00:00,001\tWARNING worker.py:2058 "
                  "-- The node with node id: 4b1e2f and address: 10.0.0.7 and node name: 10.0.0.7"
                  " has been marked dead because the detector has missed too many heartbeats "
                  "from it.\nray.exceptions.ActorDiedError: The actor died unexpectedly before "
                  "finishing this task.\n"}))
    c.append(syn("rs-ray-oom", "host_oom", "Ray's memory monitor killing a worker",
                 {"0.0.log": STEPS + "ray.exceptions.OutOfMemoryError: Task was killed due to "
                  "the node running low on memory.\nMemory on the node (IP: 10.0.0.7) where the "
                  "task was running was 61.2GB / 64.0GB (0.956), which exceeds the threshold.\n"}))
    c.append(syn("rs-tf-gpu-bfc-oom", "cuda_oom",
                 "TensorFlow's GPU allocator (BFC) out of memory, then the op's error "
                 "(formats read in tensorflow issues)",
                 {"0.0.log": STEPS + "2026-11-29 10:00:00.1: W tensorflow/tsl/framework/"
                  "bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out of memory trying to "
                  "allocate 4.00GiB (rounded to 4294967296)requested by op MatMul\n"
                  "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_"
                  "node __wrapped__MatMul}} OOM when allocating tensor with shape[32768,32768] "
                  "and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator "
                  "GPU_0_bfc [Op:MatMul]\n"}))
    c.append(syn("rs-tf-bfc-not-a-failure", "success",
                 "the BFC allocator's retry warning that says it is not a failure; job ends 0",
                 {"0.0.log": "2026-11-29 10:00:00.1: W tensorflow/core/common_runtime/bfc_"
                  "allocator.cc:217] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
                  "2.1GiB. The caller indicates that this is not a failure, but may mean that "
                  "there could be performance gains if more memory were available.\n" + STEPS},
                 exit_code=0))
    c.append(syn("rs-xla-gpu-oom", "cuda_oom", "XLA on a GPU out of memory (jaxlib error)",
                 {"0.0.log": STEPS + "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: "
                  "Out of memory while trying to allocate 8589934592 bytes.\n"}))
    c.append(syn("rs-completed-silent", "success",
                 "COMPLETED, exit 0, but silent longer than the hang threshold (a long final "
                 "evaluation)", {"0.0.log": STEPS + "evaluating...\nfinal accuracy 0.91\n"},
                 exit_code=0, slurm_state="COMPLETED", hang_threshold_s=600.0, silence_s=1800.0))
    c.append(syn("rs-torchrun-sigterm-cancel", "cancelled",
                 "torchrun receiving SIGTERM from scancel (its elastic agent's message)",
                 {"0.0.log": STEPS + "W1129 10:00:00.000 1200 torch/distributed/elastic/agent/"
                  "server/api.py:704] Received 15 death signal, shutting down workers\n"},
                 exit_code=1, slurm_state="CANCELLED"))
    # multi-rank through Slurm: srun's task lines in the batch log name the failing task
    cid = "rs-srun-oom-rank1"
    c.append(syn(cid, "host_oom", "2 nodes: rank 1 killed by the cgroup OOM killer; srun's "
                 "task-level lines (format of srun) in the batch log; exit records: rank 1 "
                 "SIGKILL first, rank 0 SIGTERM later", {
                     "batch.0.log": "srun: error: n2: task 1: Out Of Memory\nsrun: error: n1: "
                     "task 0: Terminated\nsrun: Force Terminated StepId=95.0\n",
                     "0.0.log": STEPS + "RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
                     "pair.cc:534] Connection closed by peer [10.0.0.2]:27018\n",
                     "0.1.log": STEPS}, exit_code=None, root_rank=1, tasks=[
                     t(cid, "batch.0.log", 0, "n1", "batch", 1, None, 30.0),
                     t(cid, "0.0.log", 0, "n1", "0", None, 15, 20.0),
                     t(cid, "0.1.log", 1, "n2", "0", None, 9, 10.0)]))
    cid = "rs-srun-segv-rank2"
    c.append(syn(cid, "segfault", "3 nodes: rank 2 segfaults; srun reports it, then "
                 "terminates ranks 0 and 1", {
                     "batch.0.log": "srun: error: n3: task 2: Segmentation fault (core dumped)\n"
                     "srun: error: n1: task 0: Terminated\nsrun: error: n2: task 1: Terminated\n",
                     "0.0.log": STEPS, "0.1.log": STEPS, "0.2.log": STEPS[:200]},
                 exit_code=None, root_rank=2, tasks=[
                     t(cid, "batch.0.log", 0, "n1", "batch", 139, None, 30.0),
                     t(cid, "0.0.log", 0, "n1", "0", None, 15, 21.0),
                     t(cid, "0.1.log", 1, "n2", "0", None, 15, 21.0),
                     t(cid, "0.2.log", 2, "n3", "0", None, 11, 20.0)]))
    cid = "rs-srun-node-failure"
    c.append(syn(cid, "node_failure", "3 nodes: n3 lost (its slurmd killed); srun's "
                 "'Node failure on' line in the batch log", {
                     "batch.0.log": "srun: error: Node failure on n3\nsrun: error: Nodes n3 are "
                     "still not responding\nslurmstepd: error: *** STEP 97.0 ON n1 CANCELLED AT "
                     "2026-11-29T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n",
                     "0.0.log": STEPS, "0.1.log": STEPS}, exit_code=None, tasks=[
                     t(cid, "batch.0.log", 0, "n1", "batch", 1, None, 30.0),
                     t(cid, "0.0.log", 0, "n1", "0", None, 15, 25.0),
                     t(cid, "0.1.log", 1, "n2", "0", None, 15, 25.0)],
                 root_node="n3"))
    cid = "rs-srun-exit-rank1-batch"
    c.append(syn(cid, "import_error", "the batch log holds srun's forwarded output of both "
                 "ranks (no per-task logs): rank 1's traceback and srun's line", {
                     "batch.0.log": STEPS + "Traceback (most recent call last):\n  File "
                     "\"train.py\", line 3, in <module>\nModuleNotFoundError: No module named "
                     "'flash_attn'\nsrun: error: n2: task 1: Exited with exit code 1\n"},
                 exit_code=1, root_rank=1, tasks=[
                     t(cid, "batch.0.log", 0, "n1", "batch", 1, None, 30.0)]))
    cid = "rs-torchrun-2local-rank3"
    c.append(syn(cid, "python_exception", "2 Slurm tasks x torchrun with 2 local ranks: "
                 "global rank 3 (Slurm task 1, local 1) raises; torch's [rankN]: prefixes",
                 {"0.0.log": STEPS, "0.1.log": "[rank2]: step 1\n[rank3]: Traceback (most "
                  "recent call last):\n[rank3]:   File \"train.py\", line 9, in <module>\n"
                  "[rank3]: IndexError: index 4 is out of bounds for dimension 0 with size 4\n"
                  "[rank2]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                  "Connection closed by peer [10.0.0.2]:29500\n"
                  "E1129 10:00:00.000 9 torch/distributed/elastic/multiprocessing/api.py:869] "
                  "failed (exitcode: 1) local_rank: 1 (pid: 9) of binary: /usr/bin/python\n"},
                 exit_code=1, root_rank=3, tasks=[
                     t(cid, "0.0.log", 0, "n1", "0", None, 15, 21.0),
                     t(cid, "0.1.log", 1, "n2", "0", 1, None, 20.0)]))
    return c


def write(cases: list[dict]) -> None:
    for d in (HERE / "cases").glob("*"):
        shutil.rmtree(d)
    with open(HERE / "labels.jsonl", "w") as lf:
        for c in cases:
            d = HERE / "cases" / c["id"]
            d.mkdir(parents=True)
            for name, data in c.pop("_logs").items():
                (d / name).write_bytes(data)
            prog_text = c.pop("_program", None)
            if prog_text:
                (d / "program.py").write_text(textwrap.dedent(prog_text))
            lf.write(json.dumps(c) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpualert-rw-") as work:
        reals = real_cases(work)
    by_id = {c["id"]: c for c in reals}
    cases = reals + shape_cases(by_id) + synthetic_cases()
    write(cases)
    print(f"{len(cases)} cases written to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
