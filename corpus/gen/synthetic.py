"""GPU-class cases composed from documented message formats (no GPU on the machines that build
the corpus). Each template writes one or more task logs (and a kernel.log where the driver
speaks) around the message: ordinary training output, a traceback through varied code, launcher
noise. The formats follow PyTorch's allocator and CUDA checks, NCCL's debug output, the NVIDIA
Xid catalogue and Slurm's own messages (corpus/README.md lists the sources); the surroundings
vary with the case id. A case's `how` names the template.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from corpus.gen import capture, transforms

SITE = "/opt/conda/envs/train/lib/python3.10/site-packages"
T0 = 1796000000.0
# What torch appends to a CUDA error's message: the asynchronous-report hint, the DSA note.
ASYNC = ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
         "stacktrace below might be incorrect.\nFor debugging consider passing "
         "CUDA_LAUNCH_BLOCKING=1")
DSA = "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."


def _pre(rng: random.Random, name: str, steps: int, dist: bool = False, rank: int = 0) -> str:
    gpus = ["8xA100-80GB", "4xH100", "8xV100-32GB", "2xA40"]
    out = [f"[{name}] starting run {rng.randrange(1000, 9999)} on {rng.choice(gpus)}",
           f"torch {rng.choice(['2.1.2+cu121', '2.3.1+cu121', '2.5.1+cu124', '1.13.1+cu117'])}, "
           f"CUDA available: True, devices: {rng.choice([2, 4, 8])}"]
    if dist:
        host = rng.choice(["gpu-017", "a100-n03", "dgx-12", "node-g4"])
        out += [f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{rank}] "
                f"NCCL INFO Bootstrap : Using eth0:10.1.{rng.randrange(0, 255)}."
                f"{rng.randrange(1, 254)}<0>",
                f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{rank}] "
                "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.1.0.5<0>",
                f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{rank}] "
                f"NCCL INFO comm 0x{rng.randrange(1 << 40):x} rank {rank} nranks 8 cudaDev "
                f"{rank % 8} - Init COMPLETE"]
    loss = rng.uniform(2, 9)
    for s in range(steps):
        loss *= rng.uniform(0.9, 0.99)
        out.append(f"step {s * 50:6d} | loss {loss:.4f} | lr {rng.uniform(1e-5, 5e-4):.2e} | "
                   f"{rng.uniform(80, 400):.1f} samples/s")
    return "\n".join(out) + "\n"


def _tb(rng: random.Random, frames: list[tuple[str, str, str]], exc: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for f, fn, code in frames:
        lines.append(f'  File "{f}", line {rng.randrange(20, 1800)}, in {fn}')
        lines.append(f"    {code}")
    return "\n".join(lines) + "\n" + exc + "\n"


def _user_frames(rng: random.Random) -> list[tuple[str, str, str]]:
    proj = rng.choice(["/home/jdoe/llm-ft", "/scratch/u123/vision", "/workspace/proj",
                       "/gpfs/home/ak/seg"])
    return [(f"{proj}/train.py", "<module>", "main(cfg)"),
            (f"{proj}/train.py", "main", "trainer.fit(model, loaders)"),
            (f"{proj}/engine.py", "train_one_epoch", "outputs = model(**batch)")]


def _torch_frames(rng: random.Random, tail: list[tuple[str, str, str]]) -> list:
    mod = f"{SITE}/torch/nn/modules/module.py"
    return [(mod, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
            (mod, "_call_impl", "return forward_call(*args, **kwargs)")] + tail


def _size(rng: random.Random) -> str:
    v = rng.choice([rng.uniform(1, 900), rng.uniform(1, 80)])
    unit = "MiB" if v > 80 else "GiB"
    return f"{v:.2f} {unit}"


# ---------------------------------------------------------------- message templates

def cuda_oom(rng: random.Random, p: dict) -> str:
    style = p.get("style", "torch2")
    dev = rng.randrange(8)
    if style == "torch2":
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_size(rng)}. "
               f"GPU {dev} has a total capacity of 79.15 GiB of which {rng.uniform(10, 900):.2f} "
               "MiB is free. Including non-PyTorch memory, this process has "
               f"78.{rng.randrange(10, 99)} GiB memory in use. Of the allocated memory "
               f"{rng.uniform(60, 76):.2f} GiB is allocated by PyTorch, and "
               f"{rng.uniform(0.1, 3):.2f} GiB is reserved by PyTorch but unallocated. If "
               "reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
               "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
               "#environment-variables)")
    elif style == "torch1":
        msg = (f"RuntimeError: CUDA out of memory. Tried to allocate {_size(rng)} (GPU {dev}; "
               f"31.75 GiB total capacity; {rng.uniform(20, 30):.2f} GiB already allocated; "
               f"{rng.uniform(1, 300):.2f} MiB free; {rng.uniform(29, 31):.2f} GiB reserved in "
               "total by PyTorch) If reserved memory is >> allocated memory try setting "
               "max_split_size_mb to avoid fragmentation.  See documentation for Memory "
               "Management and PYTORCH_CUDA_ALLOC_CONF")
    elif style == "tf":
        n = rng.choice([2147483648, 1073741824, 536870912])
        return (f"2024-05-0{rng.randrange(1, 9)} 11:{rng.randrange(10, 59)}:03."
                f"{rng.randrange(100000, 999999)}: W tensorflow/core/common_runtime/"
                "bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out "
                f"of memory trying to allocate {n / 2**30:.2f}GiB (rounded to {n})requested by op "
                "MatMul\nIf the cause is memory fragmentation maybe the environment variable "
                "'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \n"
                + _tb(rng, [("/home/u/keras_train.py", "<module>", "model.fit(ds, epochs=30)")],
                      "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph "
                      "execution error:\n\nOOM when allocating tensor with shape[64,1024,4096] and "
                      "type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator "
                      "GPU_0_bfc\n\t [[{{node model/dense_3/MatMul}}]]\nHint: If you want to see a "
                      "list of allocated tensors when OOM happens, add report_tensor_allocations_"
                      "upon_oom to RunOptions for current allocation info.\n [Op:__inference_train_"
                      "function_4121]"))
    elif style == "xla_gpu_alloc":
        # XLA's older GPU buffer path (MaybeOwningGpuMemory::AllocateShared) words it like the
        # CPU client: ResourceExhausted("Out of memory allocating %d bytes."); the device lines
        # JAX / XLA log at start say it is a GPU
        dev = (f"I0412 09:1{rng.randrange(10)}:2{rng.randrange(10)}.{rng.randrange(10**5, 10**6)}"
               f"  {rng.randrange(1000, 99999)} pjrt_client.cc:583] Addressable PjRt-IFRT "
               f"device: CudaDevice(id={dev})" if p.get("device") != "streamexec" else
               f"I0412 09:14:02.{rng.randrange(10**5, 10**6)}  {rng.randrange(1000, 99999)} "
               f"service.cc:153]   StreamExecutor device ({dev}): NVIDIA A100-SXM4-80GB, "
               "Compute Capability 8.0")
        return dev + "\n" + _tb(
            rng, [("/home/u/train_flax.py", "<module>", "params = model.init(key, batch)")],
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating "
            f"{rng.randrange(10**9, 9 * 10**10)} bytes.")
    elif style == "jax":
        return _tb(rng, [("/home/u/jax_train.py", "<module>", "state, m = train_step(state, b)")],
                   "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
                   f"trying to allocate {rng.randrange(10**9, 9 * 10**10)} bytes.")
    elif style == "cublas":
        msg = ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
               "`cublasCreate(handle)`")
    frames = _user_frames(rng) + _torch_frames(rng, [
        (f"{SITE}/torch/nn/modules/linear.py", "forward",
         "return F.linear(input, self.weight, self.bias)")])
    return _tb(rng, frames, msg)


def cuda_error(rng: random.Random, p: dict) -> str:
    err = p.get("err", "an illegal memory access was encountered")
    msg = f"RuntimeError: CUDA error: {err}\n{ASYNC}\n{DSA}"
    frames = _user_frames(rng) + [(f"{SITE}/torch/_tensor.py", "backward",
                                   "torch.autograd.backward(")]
    return _tb(rng, frames, msg)


def device_assert(rng: random.Random, p: dict) -> str:
    kind = p.get("kind", "nll")
    asserts = {
        "nll": ("/opt/pytorch/aten/src/ATen/native/cuda/Loss.cu",
                "nll_loss_forward_reduce_cuda_kernel_2d", "t >= 0 && t < n_classes"),
        "index": ("/opt/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu", "operator()",
                  "-sizes[i] <= index && index < sizes[i] && \"index out of bounds\""),
        "embed": ("/opt/pytorch/aten/src/ATen/native/cuda/Indexing.cu", "indexSelectLargeIndex",
                  "srcIndex < srcSelectDimSize"),
        "scatter": ("/opt/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu",
                    "operator()",
                    "idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\""),
    }
    f, fn, cond = asserts[kind]
    lines = []
    for t in range(rng.randrange(2, 6)):
        lines.append(f"{f}:{rng.randrange(90, 1500)}: {fn}: block: [{rng.randrange(0, 512)},0,0], "
                     f"thread: [{t * rng.randrange(1, 32)},0,0] Assertion `{cond}` failed.")
    msg = f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}"
    return "\n".join(lines) + "\n" + _tb(rng, _user_frames(rng), msg)


def cuda_setup(rng: random.Random, p: dict) -> str:
    kind = p.get("kind", "driver_old")
    if kind == "driver_old":
        msg = ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
               "Please update your GPU driver by downloading and installing a new version from the "
               "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
               "https://pytorch.org to install a PyTorch version that has been compiled with your "
               "version of the CUDA driver.")
    elif kind == "no_kernel":
        msg = ("RuntimeError: CUDA error: no kernel image is available for execution on the "
               f"device\n{ASYNC}")
    else:
        msg = ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
               "CUDA kernel errors might be asynchronously reported at some other API call, so the "
               "stacktrace below might be incorrect.")
    return _tb(rng, _user_frames(rng)[:2] + [(f"{SITE}/torch/cuda/__init__.py", "_lazy_init",
                                               "torch._C._cuda_init()")], msg)


def nccl(rng: random.Random, p: dict, rank: int = 0) -> str:
    kind = p.get("kind", "system")
    host = rng.choice(["gpu-017", "a100-n03", "dgx-12", "node-g4"])
    pid = rng.randrange(1000, 99999)
    warn = {
        "system": f"\n{host}:{pid}:{pid + 7} [{rank}] misc/socket.cc:538 NCCL WARN "
                  "socketStartConnect: Connect to 10.1.0.7<43213> failed : Software caused "
                  "connection abort",
        "ib": f"\n{host}:{pid}:{pid + 9} [{rank}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
              "completion from peer 10.1.0.9<52311> with status=12 opcode=0 len=0 vendor err 129 "
              "(Recv) localGid ::ffff:10.1.0.5 remoteGids::ffff:10.1.0.9 hca mlx5_2",
        "cuda": f"\n{host}:{pid}:{pid + 3} [{rank}] enqueue.cc:1556 NCCL WARN Cuda failure "
                "'an illegal memory access was encountered'",
    }[kind]
    result = {"system": ("unhandled system error (run with NCCL_DEBUG=INFO for details)",
                         "ncclSystemError: System call (e.g. socket, malloc) or external library "
                         "call failed or device error. "),
              "ib": ("remote process exited or there was a network error",
                     "ncclRemoteError: A call failed possibly due to a network error or a remote "
                     "process exiting prematurely."),
              "cuda": ("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                       "ncclUnhandledCudaError: Call to CUDA function failed.")}[kind]
    ver = rng.choice(["2.18.1", "2.19.3", "2.20.5", "2.21.5"])
    exc = rng.choice(["torch.distributed.DistBackendError", "RuntimeError"])
    msg = (f"{exc}: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
           f"{rng.randrange(1200, 2100)}, {result[0]}, NCCL version {ver}\n{result[1]}\n"
           f"Last error:\n{warn.strip()}")
    frames = _user_frames(rng)[:2] + [
        (f"{SITE}/torch/distributed/c10d_logger.py", "wrapper", "return func(*args, **kwargs)"),
        (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce",
         "work = group.allreduce([tensor], opts)")]
    return warn + "\n" + _tb(rng, frames, msg)


def watchdog(rng: random.Random, rank: int) -> str:
    seq = rng.randrange(100, 90000)
    return (f"[rank{rank}]:[E{rng.randrange(1000, 1231)} 0{rng.randrange(1, 9)}:"
            f"{rng.randrange(10, 59)}:{rng.randrange(10, 59)}.{rng.randrange(10**8, 10**9)} "
            "ProcessGroupNCCL.cpp:616] [Rank "
            f"{rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
            "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
            f"{600000 + rng.randrange(1, 900)} milliseconds before timing out.\n"
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1709] [PG 0 Rank {rank}] To avoid data "
            "inconsistency, we are taking the entire process down.\n")


def xid(rng: random.Random, p: dict) -> tuple[str, str]:
    """(kernel lines, what the job printed)."""
    bus = f"{rng.randrange(0x10, 0xe0):02x}"
    pid = rng.randrange(1000, 99999)
    num = p.get("xid", 79)
    text = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) has "
            "been detected on GPU in the framebuffer at partition 6, subpartition 0.",
            74: "NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
            94: "Contained: SM (0x1). RST: No, D-RST: No",
            95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
            119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function "
                 "76 (GSP_RM_CONTROL) (0x20801348 0x4)."}[num]
    stamp = f"[{rng.uniform(1e5, 9e5):.6f}]"
    if num == 79:
        kern = (f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, "
                f"{text}\n"
                f"{stamp} NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.\n")
        job = ("RuntimeError: CUDA error: unspecified launch failure\nCUDA kernel errors might be "
               "asynchronously reported at some other API call, so the stacktrace below might be "
               "incorrect.")
    else:
        kern = f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): {num}, pid={pid}, name=python, {text}\n"
        job = {48: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
               74: "RuntimeError: CUDA error: unspecified launch failure",
               94: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
               95: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
               119: "RuntimeError: CUDA error: unknown error"}[num]
    return kern, job


# ---------------------------------------------------------------- cases

def _write(d: Path, name: str, text: str, transform: str | None, cid: str) -> None:
    data = text.encode()
    if transform:
        data = transforms.apply(transform, data, cid)
    (d / name).write_bytes(data)


def _task(root: Path, d: Path, name: str, rank: int, code: int | None, sig: int | None,
          end: float, node: str | None = None, step: str = "run") -> dict:
    rec = {"node": node, "step": step, "rank": rank, "exit_code": code, "signal": sig,
           "core_dumped": False, "end_time": end}
    (d / name).with_suffix(".exit").write_text(json.dumps(rec) + "\n")
    return {"log": str((d / name).relative_to(root)), **{k: rec[k] for k in (
        "rank", "node", "step", "exit_code", "signal", "core_dumped", "end_time")}}


def _lost_task(root: Path, d: Path, name: str, rank: int, step: str = "0") -> dict:
    """A task whose node died with it: no exit record, nothing known of its end."""
    return {"log": str((d / name).relative_to(root)), "rank": rank, "node": None, "step": step,
            "exit_code": None, "signal": None, "core_dumped": False, "end_time": None}


def _rank_task(root: Path, d: Path, r: int, text: str, tr: str | None, cid: str,
               code: int | None, sig: int | None, end: float, node: str | None,
               alone: bool = False) -> dict:
    """Rank r's log 0.r.log (run.0.log when `alone`: the job's one task) shaped by the transform
    `tr`, and its exit record."""
    name = "run.0.log" if alone else f"0.{r}.log"
    _write(d, name, text, tr, cid)
    return _task(root, d, name, r, code, sig, round(end, 3), node=node,
                 step="run" if alone else "0")


def _one_task(root: Path, d: Path, text: str, tr: str | None, cid: str, end: float,
              code: int | None = 1, sig: int | None = None) -> list[dict]:
    """A case of one task: its log `run.0.log` (shaped by the transform `tr`) and exit record."""
    _write(d, "run.0.log", text, tr, cid)
    return [_task(root, d, "run.0.log", 0, code, sig, end)]


def _kernel_log(root: Path, d: Path, kern: str) -> str:
    """Write the driver's lines as the case's kernel.log; its path as the label names it."""
    (d / "kernel.log").write_text(kern)
    return str((d / "kernel.log").relative_to(root))


def _node_failure(node: str, what: str, stamp: str) -> str:
    """srun's and slurmstepd's lines when node `node` of the job stops answering (`what`: `JOB
    <id>` or `STEP <id>.<step>`, the step slurmstepd on n1 cancels)."""
    return (f"srun: error: Node failure on {node}\n"
            f"slurmstepd: error: *** {what} ON n1 CANCELLED AT {stamp} DUE TO NODE FAILURE, SEE "
            "SLURMCTLD LOG FOR DETAILS ***\n")


def _node_loss_times(rng: random.Random) -> tuple[float, int, str]:
    """(the case's end time, its Slurm job id, when slurmstepd says it cancelled the job)."""
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    stamp = (f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}T0{rng.randrange(0, 9)}:"
             f"{rng.randrange(10, 59)}:{rng.randrange(10, 59)}")
    return end, jid, stamp


def _daemon_lost(rte: str, hnp: str, remote: str) -> str:
    """Open MPI's runtime (`rte`: ORTE, or PRTE from Open MPI 5) when it loses a node's daemon."""
    bar = "-" * 74
    return (f"{bar}\n{rte} has lost communication with a remote daemon.\n\n"
            f"  HNP daemon   : {hnp}\n  Remote daemon: {remote}\n\n"
            "This is usually due to either a failure of the TCP network\nconnection to the "
            "node, or possibly an internal failure of\nthe daemon itself. We cannot recover "
            f"from this failure, and\ntherefore will terminate the job.\n{bar}\n")


def _ranked(text: str, r: int) -> str:
    """torch >= 2.2 prefixes each line of a rank's uncaught exception with `[rankN]:`."""
    return "".join(f"[rank{r}]:{' ' if ln else ''}{ln}\n" for ln in text.rstrip("\n").split("\n"))


def _case(c: dict) -> tuple[str, dict, str, random.Random, str | None]:
    """(id, params, template, the case's random source seeded by its id, transform)."""
    return c["id"], c.get("params") or {}, c["synth"], random.Random(c["id"]), c.get("transform")


def compose(root: Path, d: Path, c: dict, single: dict | None = None,
            logged: dict | None = None, multi: dict | None = None, plain: tuple = (),
            aborted: tuple = ()) -> dict:
    """Compose one case of a set's composer (synthetic4, synthetic_ho5, …) into `d`; its label.

    The case's end time is drawn first, then the template's text. A template is one of
    - `single[tmpl](rng, p)`: the message of one task, after the job's preamble unless the
      case's `kind` is in `plain` (a log that is the library's own output from its first line);
      the task exits 1, or is killed by SIGABRT where the kind is in `aborted`;
    - `logged[tmpl](rng, p)`: (the kernel's lines or None, one task's whole log);
    - `multi[tmpl](rng, p, d, root, cid, tr)`: writes its logs itself, returns (tasks, root
      rank) or (tasks, root rank, Slurm state)."""
    cid, p, tmpl, rng, tr = _case(c)
    end = T0 + rng.randrange(0, 10**6)
    kernel, root_rank, state = None, None, c.get("slurm_state")
    if single and tmpl in single:
        body = single[tmpl](rng, p)
        pre = "" if p.get("kind") in plain else _pre(rng, c.get("name", "job"), rng.randrange(2, 8))
        sig = 6 if p.get("kind") in aborted else None
        tasks = _one_task(root, d, pre + body, tr, cid, end, None if sig else 1, sig)
    elif logged and tmpl in logged:
        kern, text = logged[tmpl](rng, p)
        kernel = _kernel_log(root, d, kern) if kern else None
        tasks = _one_task(root, d, text, tr, cid, end)
    elif multi and tmpl in multi:
        tasks, root_rank, *rest = multi[tmpl](rng, p, d, root, cid, tr)
        state = rest[0] if rest and rest[0] else state
    else:
        raise ValueError(f"unknown synthetic template {tmpl!r}")
    return synthetic_label(c, cid, tmpl, p, tasks, root_rank, state, kernel, tr)


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one synthetic case into `d`; return its label."""
    cid, p, tmpl, rng, tr = _case(c)
    if tmpl in ("tuning_single", "tuning_cascade"):  # the tuning corpus's GPU composer
        from corpus.gen import synthetic_gpu
        lab = synthetic_gpu.build(root, c)
        if lab["id"] != cid:
            raise ValueError(f"synthetic case {cid} builds {lab['id']}")
        return lab
    name = c.get("name", "job")
    kernel = None
    tasks = []
    end = T0 + rng.randrange(0, 10**6)
    root_rank = None
    slurm_state = c.get("slurm_state")
    if tmpl in ("cuda_oom", "cuda_error", "device_assert", "cuda_setup"):
        body = {"cuda_oom": cuda_oom, "cuda_error": cuda_error, "device_assert": device_assert,
                "cuda_setup": cuda_setup}[tmpl](rng, p)
        tasks = _one_task(root, d, _pre(rng, name, rng.randrange(2, 9)) + body, tr, cid, end)
    elif tmpl == "xid":
        kern, job = xid(rng, p)
        pre = _pre(rng, name, rng.randrange(2, 9))
        body = _tb(rng, _user_frames(rng), job)
        if p.get("where", "kernel") == "kernel":
            kernel = _kernel_log(root, d, kern)
            text = pre + body
        else:  # a container that prints dmesg into the job's own output
            text = pre + "--- dmesg ---\n" + kern + body
        tasks = _one_task(root, d, text, tr, cid, end)
    elif tmpl in ("nccl", "nccl_cascade", "watchdog_cascade"):
        n = p.get("ranks", 1)
        root_rank = p.get("root", 0) if n > 1 else None
        for r in range(n):
            pre = _pre(rng, name, rng.randrange(2, 6), dist=True, rank=r)
            if r == (root_rank or 0):
                # watchdog_cascade: the root rank is stuck and prints nothing more; the launcher
                # stops it after the others died of the watchdog timeout.
                body = "" if tmpl == "watchdog_cascade" else nccl(rng, p, r)
                t_end = end + (800 if tmpl == "watchdog_cascade" else 0)
            else:
                body = watchdog(rng, r) + ("terminate called after throwing an instance of "
                                           "'c10::DistBackendError'\n")
                t_end = end + rng.uniform(30, 700)
            stuck = tmpl == "watchdog_cascade" and r == root_rank
            is_root = r == (root_rank or 0)
            tasks.append(_rank_task(root, d, r, pre + body, tr, cid,
                                    1 if is_root and not stuck else None,
                                    15 if stuck else (None if is_root else 6), t_end,
                                    f"n{r // 2 + 1}"))
    elif tmpl == "device_mismatch":
        where = p.get("where", "linear")
        msg = {"linear": "RuntimeError: Expected all tensors to be on the same device, but found "
                         "at least two devices, cuda:0 and cpu! (when checking argument for "
                         "argument mat1 in method wrapper_CUDA_addmm)",
               "index": "RuntimeError: Expected all tensors to be on the same device, but got "
                        "index is on cpu, different from other tensors on cuda:0 (when checking "
                        "argument in method wrapper_CUDA__index_select)",
               "twogpu": "RuntimeError: Expected all tensors to be on the same device, but found "
                         "at least two devices, cuda:1 and cuda:0!"}[where]
        tasks = _one_task(root, d, _pre(rng, name, 3) + _tb(rng, _user_frames(rng), msg), tr, cid,
                          end)
    elif tmpl == "stale":
        proj = "/nfs/projects/lm/data"
        msg = f"OSError: [Errno 116] Stale file handle: '{proj}/shard-{rng.randrange(999):05d}.bin'"
        tasks = _one_task(root, d, _pre(rng, name, 5) + _tb(rng, _user_frames(rng), msg), tr, cid,
                          end)
    elif tmpl == "node_fail":
        # What srun and slurmstepd print when a node of the job stops answering.
        jid = rng.randrange(100000, 999999)
        bad = p.get("node", "n3")
        text = (_pre(rng, name, rng.randrange(3, 9)) + _node_failure(
            bad, f"JOB {jid}",
            f"2026-02-1{rng.randrange(0, 9)}T0{rng.randrange(0, 9)}:1{rng.randrange(0, 9)}:44"))
        if p.get("style") == "ray":
            text = (_pre(rng, name, 4) + "(raylet) The node with node id: "
                    f"{rng.randrange(1 << 60):x}{rng.randrange(1 << 60):x} and address: 10.1.0."
                    f"{rng.randrange(2, 250)} and node name: 10.1.0.9 has been marked dead because "
                    "the detector has missed too many heartbeats from it. This can happen when a "
                    "\t(1) raylet crashes unexpectedly (OOM, etc.) \n\t(2) raylet has lagging "
                    "heartbeats due to slow network or busy workload.\n")
        _write(d, "batch.0.log" if slurm_state else "run.0.log", text, tr, cid)
        tasks.append(_task(root, d, "batch.0.log" if slurm_state else "run.0.log", 0,
                           None if slurm_state else 1, 9 if slurm_state else None, end,
                           step="batch" if slurm_state else "run",
                           node="n1" if slurm_state else None))
    else:
        raise ValueError(f"unknown synthetic template {tmpl!r}")
    return synthetic_label(c, cid, tmpl, p, tasks, root_rank, slurm_state, kernel, tr)


def synthetic_label(c: dict, cid: str, tmpl: str, p: dict, tasks: list, root_rank, state,
                    kernel=None, tr=None) -> dict:
    """The label of a composed case (shared by every synthetic*.py): the case's own fields win
    over what the template made."""
    t0 = tasks[0]
    return capture.label(
        cid, c["class"], tasks, command=f"synthetic:{tmpl} {json.dumps(p, sort_keys=True)}",
        source="synthetic", how=c.get("how") or f"template {tmpl} ({p})",
        root_rank=c.get("root_rank", root_rank),
        exit_code=c.get("exit_code", t0["exit_code"]), signal_=c.get("signal", t0["signal"]),
        slurm_state=state, kernel_log=kernel, transform=tr)
