"""GPU-class cases composed from documented message formats (no GPU on the machines that build
the corpus). Each template writes one or more task logs (and a kernel.log where the driver
speaks) around the message: ordinary training output, a traceback through varied code, launcher
noise. The formats follow PyTorch's allocator and CUDA checks, NCCL's debug output, the NVIDIA
Xid catalogue and Slurm's own messages (corpus/README.md lists the sources); the surroundings
vary with the case id. A case's `how` names the template.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import (
    ASYNC,
    DSA,
    SITE,
    T0,
    _case,
    _kernel_log,
    _node_failure,
    _one_task,
    _pre,
    _rank_task,
    _size,
    _task,
    _tb,
    _torch_frames,
    _user_frames,
    _write,
    synthetic_label,
)

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


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one synthetic case into `d`; return its label."""
    cid, p, tmpl, rng, tr = _case(c)
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
