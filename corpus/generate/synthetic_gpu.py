"""Family `synthetic_gpu`: GPU failures composed from documented message formats (no GPU here).

Every case is marked "source": "synthetic" and its `how` names the template used. The messages
follow the formats PyTorch's CUDA allocator / c10 CUDA checks, NVIDIA's NCCL and the NVIDIA
driver's Xid kernel messages use; the surroundings (configs, progress, tracebacks through
different user code, launcher lines, rank tags) vary per case from a seed, so no two cases are
the same text. Multi-rank cases put the cause on one rank and the documented cascade (NCCL
watchdog timeouts, remote errors) on the others, with later end times.
"""

from __future__ import annotations

import json
import random
import time

from common import CORPUS, case_dir, label

PREFIXES = ("syn-",)
NODES = [f"gpu-n{i:03d}" for i in range(1, 40)]
BASE_T = 1_790_000_000.0

USER_FRAMES = [
    ("train.py", "main", "trainer.fit(model, loader)"),
    ("trainer.py", "fit", "loss = self.training_step(batch)"),
    ("trainer.py", "training_step", "out = self.model(**batch)"),
    ("models/transformer.py", "forward", "h = block(h, mask)"),
    ("models/transformer.py", "forward", "attn = self.attn(self.ln1(x))"),
    ("models/resnet.py", "forward", "x = self.layer3(x)"),
    ("engine.py", "step", "self.scaler.scale(loss).backward()"),
    ("engine.py", "step", "self.optimizer.step()"),
    ("utils/dist.py", "reduce_metrics", "dist.all_reduce(t, op=dist.ReduceOp.SUM)"),
]
TORCH_FRAMES = [
    ("torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
    ("torch/nn/modules/linear.py", "forward", "return F.linear(input, self.weight, self.bias)"),
    ("torch/_tensor.py", "backward", "torch.autograd.backward("),
    ("torch/autograd/__init__.py", "backward", "_engine_run_backward("),
    ("torch/nn/functional.py", "cross_entropy", "return torch._C._nn.cross_entropy_loss("),
    ("torch/optim/adamw.py", "step", "adamw(params_with_grad,"),
]


def _gib(r: random.Random, lo: float, hi: float) -> str:
    return f"{r.uniform(lo, hi):.2f} GiB"


def traceback(r: random.Random, final: str, torch_frames: bool = True) -> list[str]:
    site = r.choice(["/home/alice/proj", "/workspace/src", "/scratch/bob/llm", "/opt/app"])
    lib = r.choice(["/opt/conda/lib/python3.10/site-packages", "/usr/local/lib/python3.11/"
                    "dist-packages", "/home/alice/.venv/lib/python3.11/site-packages"])
    lines = ["Traceback (most recent call last):"]
    frames = [f for f in USER_FRAMES if r.random() < 0.5] or USER_FRAMES[:2]
    for path, fn, code in frames:
        lines += [f'  File "{site}/{path}", line {r.randint(20, 900)}, in {fn}', f"    {code}"]
    if torch_frames:
        for path, fn, code in r.sample(TORCH_FRAMES, r.randint(1, 3)):
            lines += [f'  File "{lib}/{path}", line {r.randint(100, 2000)}, in {fn}',
                      f"    {code}"]
    return lines + final.split("\n")


def preamble(r: random.Random, rank: int | None, world: int) -> list[str]:
    gpu = r.choice(["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-PCIE-40GB",
                    "Tesla V100-SXM2-32GB", "NVIDIA L40S", "NVIDIA RTX A6000"])
    out = []
    if rank in (None, 0):
        out += [f"Using device: cuda:0 ({gpu})",
                f"torch {r.choice(['2.1.2', '2.2.1', '2.3.0', '2.4.1', '2.5.1'])}, "
                f"CUDA {r.choice(['11.8', '12.1', '12.4'])}, "
                f"cuDNN {r.choice(['8902', '90100', '8700'])}",
                f"world_size={world} global_batch={r.choice([256, 512, 1024])} "
                f"micro_batch={r.choice([1, 2, 4, 8])}"]
    if r.random() < 0.5:
        pid = r.randint(1000, 90000)
        out.append(f"{r.choice(NODES)}:{pid}:{pid + r.randint(1, 90)} [{rank or 0}] "
                   f"NCCL INFO Bootstrap : Using ib0:10.{r.randint(0, 9)}.{r.randint(0, 255)}."
                   f"{r.randint(1, 254)}<0>")
        out.append(f"NCCL version {r.choice(['2.18.1', '2.19.3', '2.20.5', '2.21.5'])}+cuda12.1")
    loss = r.uniform(3, 10)
    every = r.choice([10, 50, 100])
    for i in range(every, every * r.randint(1, 25), every):
        loss *= r.uniform(0.95, 1.0)
        out.append(r.choice([f"step {i} | loss {loss:.4f} | {r.uniform(100, 4000):.0f} tok/s",
                             f"[{i}] train_loss={loss:.4f} lr={r.uniform(1e-5, 3e-4):.2e}",
                             f"Iter {i}: loss {loss:.3f}, mem {r.uniform(10, 70):.1f}GB"]))
    if r.random() < 0.3:
        out.append("UserWarning: TypedStorage is deprecated. It will be removed in the future "
                   "and UntypedStorage will be the only storage class.")
    return out


CUDA_HINT = ("CUDA kernel errors might be asynchronously reported at some other API call, so "
             "the stacktrace below might be incorrect.\nFor debugging consider passing "
             "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
             "assertions.\n")


# -------------------------------------------------------------- per-class messages
def m_cuda_oom(r: random.Random) -> tuple[list[str], str]:
    total = r.choice([15.77, 31.74, 39.39, 79.15, 44.34])
    t = r.randint(0, 4)
    if t == 0:
        used = total - r.uniform(0.01, 1.5)
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
               f"{_gib(r, 0.1, 20)}. GPU {r.randint(0, 7)} has a total capacity of {total:.2f} "
               f"GiB of which {r.randint(1, 900)}.{r.randint(10, 99)} MiB is free. Including "
               f"non-PyTorch memory, this process has {used:.2f} GiB memory in use. Of the "
               f"allocated memory {used - 1.2:.2f} GiB is allocated by PyTorch, and "
               f"{r.uniform(0.1, 1):.2f} GiB is reserved by PyTorch but unallocated. If reserved "
               "but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
               "documentation for Memory Management  "
               "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        return traceback(r, msg), "torch OutOfMemoryError (PyTorch >= 2.2 allocator message)"
    if t == 1:
        msg = (f"RuntimeError: CUDA out of memory. Tried to allocate {r.randint(2, 900)}.00 MiB "
               f"(GPU 0; {total:.2f} GiB total capacity; {total - 1:.2f} GiB already allocated; "
               f"{r.randint(1, 60)}.{r.randint(10, 99)} MiB free; {total - 0.6:.2f} GiB reserved "
               "in total by PyTorch) If reserved memory is >> allocated memory try setting "
               "max_split_size_mb to avoid fragmentation.  See documentation for Memory "
               "Management and PYTORCH_CUDA_ALLOC_CONF")
        return traceback(r, msg), "RuntimeError CUDA out of memory (PyTorch 1.x format)"
    if t == 2:
        msg = ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
               "`cublasCreate(handle)`")
        return traceback(r, msg), "cuBLAS handle allocation failure"
    if t == 3:
        msg = (f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
               f"trying to allocate {r.randint(1, 40) * 1073741824} bytes.")
        return ["Traceback (most recent call last):", '  File "train_jax.py", line 88, in '
                "<module>", "    state, metrics = p_train_step(state, batch)", msg], \
            "XLA RESOURCE_EXHAUSTED (JAX)"
    msg = ("RuntimeError: CUDA error: out of memory\n" + CUDA_HINT)
    return traceback(r, msg), "CUDA error: out of memory (c10 CUDA check)"


def m_cuda_error(r: random.Random) -> tuple[list[str], str]:
    what = r.choice(["an illegal memory access was encountered", "misaligned address",
                     "unspecified launch failure", "an illegal instruction was encountered",
                     "too many resources requested for launch"])
    t = r.randint(0, 3)
    if t == 0:
        return traceback(r, f"RuntimeError: CUDA error: {what}\n{CUDA_HINT}"), \
            f"c10 CUDA check: {what}"
    if t == 1:
        lines = ["terminate called after throwing an instance of 'c10::Error'",
                 f"  what():  CUDA error: {what}", *CUDA_HINT.rstrip().split("\n"), "",
                 "Exception raised from c10_cuda_check_implementation at "
                 "../c10/cuda/CUDAException.cpp:43 (most recent call first):",
                 "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 "
                 f"(0x7f{r.getrandbits(40):010x} in /usr/local/lib/python3.10/dist-packages/"
                 "torch/lib/libc10.so)"]
        return lines, f"uncaught c10::Error in a destructor/thread: {what}"
    if t == 2:
        fn = r.choice(["cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, "
                       "c, ldc)", "cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, "
                       "CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, "
                       "CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)"])
        return traceback(r, f"RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when "
                            f"calling `{fn}`"), "cuBLAS execution failure"
    return traceback(r, "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"), \
        "cuDNN execution failure"


def m_device_assert(r: random.Random) -> tuple[list[str], str]:
    kernels = [
        ("../aten/src/ATen/native/cuda/Loss.cu", 250, "nll_loss_forward_reduce_cuda_kernel_2d",
         "`t >= 0 && t < n_classes`"),
        ("../aten/src/ATen/native/cuda/IndexKernel.cu", 92, "operator()",
         "`-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"`"),
        ("../aten/src/ATen/native/cuda/Indexing.cu", 1146, "indexSelectLargeIndex",
         "`srcIndex < srcSelectDimSize`"),
        ("../aten/src/ATen/native/cuda/ScatterGatherKernel.cu", 365, "operator()",
         "`idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"`"),
    ]
    path, line, fn, cond = r.choice(kernels)
    asserts = [f"{path}:{line}: {fn}: block: [{r.randint(0, 300)},0,0], thread: "
               f"[{t},0,0] Assertion {cond} failed." for t in sorted(r.sample(range(128),
                                                                               r.randint(1, 6)))]
    msg = "RuntimeError: CUDA error: device-side assert triggered\n" + CUDA_HINT
    return asserts + traceback(r, msg), f"device-side assert in {fn}"


def m_cuda_setup(r: random.Random) -> tuple[list[str], str]:
    t = r.randint(0, 6)
    if t == 0:
        return traceback(r, "RuntimeError: No CUDA GPUs are available", False), "no GPUs visible"
    if t == 1:
        return traceback(r, "AssertionError: Torch not compiled with CUDA enabled", False), \
            "CPU-only torch build"
    if t == 2:
        v = r.choice([11040, 11020, 10020, 12000])
        return traceback(r, f"RuntimeError: The NVIDIA driver on your system is too old (found "
                            f"version {v}). Please update your GPU driver by downloading and "
                            "installing a new version from the URL: "
                            "http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
                            "https://pytorch.org to install a PyTorch version that has been "
                            "compiled with your version of the CUDA driver.", False), \
            "driver too old"
    if t == 3:
        return traceback(r, "RuntimeError: CUDA error: no kernel image is available for "
                            "execution on the device\n" + CUDA_HINT), "no kernel image for arch"
    if t == 4:
        return traceback(r, "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or "
                            "unavailable\n" + CUDA_HINT), "device busy (exclusive process mode)"
    if t == 5:
        return ["UserWarning: CUDA initialization: CUDA unknown error - this may be due to an "
                "incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES "
                "after program start. Setting the available devices to be zero. (Triggered "
                "internally at ../c10/cuda/CUDAFunctions.cpp:108.)"] + traceback(
            r, "RuntimeError: No CUDA GPUs are available", False), "CUDA init unknown error"
    return traceback(r, "RuntimeError: Found no NVIDIA driver on your system. Please check that "
                        "you have an NVIDIA GPU and installed a driver from "
                        "http://www.nvidia.com/Download/index.aspx", False), "no driver"


def m_nccl(r: random.Random, node: str, rank: int) -> tuple[list[str], str]:
    ver = r.choice(["2.18.1", "2.19.3", "2.20.5", "2.21.5"])
    pid = r.randint(1000, 90000)
    t = r.randint(0, 3)
    if t == 0:
        warn = [f"{node}:{pid}:{pid + 60} [{rank % 8}] transport/net_ib.cc:{r.randint(1200, 1700)}"
                f" NCCL WARN NET/IB : Got completion from peer 10.{r.randint(0, 9)}.0."
                f"{r.randint(1, 254)}<{r.randint(30000, 60000)}> with status=12 opcode=0 len=0 "
                f"vendor err 129 (Recv) localGid ::ffff:10.0.0.{r.randint(1, 254)} "
                f"remoteGids::ffff:10.0.0.{r.randint(1, 254)} hca mlx5_{r.randint(0, 3)}"]
        err = ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "ncclSystemError",
               "System call (e.g. socket, malloc) or external library call failed or device "
               "error.", "NET/IB : Got completion from peer with error 12")
        how = "NCCL IB completion error -> ncclSystemError"
    elif t == 1:
        warn = [f"{node}:{pid}:{pid + 7} [{rank % 8}] misc/socket.cc:{r.randint(400, 600)} NCCL "
                "WARN socketStartConnect: Connect to 10.1.0.7<45123> failed : Software caused "
                "connection abort"]
        err = ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "ncclSystemError",
               "System call (e.g. socket, malloc) or external library call failed or device "
               "error.", "socketStartConnect: Connect to 10.1.0.7<45123> failed : Software "
               "caused connection abort")
        how = "NCCL bootstrap socket failure"
    elif t == 2:
        warn = [f"{node}:{pid}:{pid + 3} [{rank % 8}] enqueue.cc:{r.randint(100, 1500)} NCCL WARN "
                "Cuda failure 'an illegal memory access was encountered'"]
        err = ("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
               "ncclUnhandledCudaError", "Call to CUDA function failed.",
               "Cuda failure 'an illegal memory access was encountered'")
        how = "ncclUnhandledCudaError"
    else:
        warn = []
        err = ("internal error - please report this issue to the NCCL developers",
               "ncclInternalError", "Internal check failed.", "Proxy Call to rank 3 failed "
               "(Connect)")
        how = "ncclInternalError"
    msg = (f"torch.distributed.DistBackendError: NCCL error in: "
           f"../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{r.randint(1200, 2100)}, "
           f"{err[0]}, NCCL version {ver}\n{err[1]}: {err[2]}\nLast error:\n{err[3]}")
    return warn + traceback(r, msg), how


XIDS = [
    (79, "GPU has fallen off the bus.", "RuntimeError: CUDA error: unspecified launch failure"),
    (48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
         "partition 6, subpartition 0.", "RuntimeError: CUDA error: uncorrectable ECC error "
                                         "encountered"),
    (94, "Contained: SM (0x1). RST: No, D-RST: No",
     "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    (95, "Uncontained: FBHUB. RST: Yes, D-RST: No",
     "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    (74, "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
     "RuntimeError: CUDA error: an illegal memory access was encountered"),
    (119, "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
          "(GSP_RM_CONTROL) (0x20800a4c 0x4).", "RuntimeError: CUDA error: unknown error"),
]


def m_hw(r: random.Random, node: str, t0: float) -> tuple[list[str], str, list[str]]:
    xid, text, err = r.choice(XIDS)
    pci = f"0000:{r.choice(['07', '0f', '47', '4e', '87', '90', 'b7', 'bd'])}:00"
    pid = r.randint(1000, 90000)
    stamp = time.strftime("%b %d %H:%M:%S", time.gmtime(t0))
    kern = [f"{stamp} {node} kernel: NVRM: GPU at PCI:{pci}: GPU-{r.getrandbits(32):08x}-"
            f"{r.getrandbits(16):04x}-{r.getrandbits(16):04x}",
            f"{stamp} {node} kernel: NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, "
            f"name=python, {text}"]
    if xid == 79:
        kern.append(f"{stamp} {node} kernel: NVRM: GPU {pci}.0: GPU has fallen off the bus.")
    task = traceback(r, err + "\n" + CUDA_HINT) if r.random() < 0.8 else [
        "Segmentation fault (core dumped)" if r.random() < 0.5 else err]
    return task, f"Xid {xid} in kernel log; task shows '{err.split(': ', 1)[-1]}'", kern


def watchdog(r: random.Random, rank: int, seq: int, ms: int) -> list[str]:
    op = r.choice(["ALLREDUCE", "ALLGATHER", "_ALLGATHER_BASE", "REDUCE_SCATTER", "BROADCAST"])
    n = r.choice([1, 1024, 16777216, 4194304])
    work = (f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, "
            f"Timeout(ms)={ms})")
    return [f"[rank{rank}]:[E ProcessGroupNCCL.cpp:{r.randint(500, 1600)}] [Rank {rank}] "
            f"Watchdog caught collective operation timeout: {work} ran for {ms + r.randint(1, 90)} "
            "milliseconds before timing out.",
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:{r.randint(500, 1600)}] [Rank {rank}] To avoid "
            "data inconsistency, we are taking the entire process down.",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  [Rank {rank}] Watchdog caught collective operation timeout: {work} ran "
            f"for {ms + r.randint(1, 90)} milliseconds before timing out."]


# -------------------------------------------------------------- writing cases
def _write(d, name: str, lines: list[str], rec: dict) -> dict:
    (d / f"{name}.log").write_text("\n".join(lines) + "\n")
    (d / f"{name}.exit").write_text(json.dumps(rec) + "\n")
    return {"log": str((d / f"{name}.log").relative_to(CORPUS)), "rank": rec["rank"],
            "node": rec["node"], "step": rec["step"], "exit_code": rec["exit_code"],
            "signal": rec["signal"], "core_dumped": rec["core_dumped"],
            "end_time": rec["end_time"]}


def _rec(node, step, rank, code, sig, end) -> dict:
    return {"node": node, "step": step, "rank": rank, "pid": None, "exit_code": code,
            "signal": sig, "core_dumped": sig == 6, "end_time": round(end, 3),
            "status": (sig if sig else code << 8)}


def single_case(i: int, cls: str, maker) -> dict:
    r = random.Random(f"syn-{cls}-{i}")
    case_id = f"syn-{cls}-{i:02d}"
    d = case_dir(case_id)
    node = r.choice(NODES)
    t_end = BASE_T + r.randint(0, 10_000_000)
    kernel = None
    if cls == "gpu_hardware":
        body, how, kern = maker(r, node, t_end - 1)
        (d / "kernel.log").write_text("\n".join(kern) + "\n")
        kernel = str((d / "kernel.log").relative_to(CORPUS))
    elif cls == "nccl_error":
        body, how = maker(r, node, 0)
    else:
        body, how = maker(r)
    lines = preamble(r, None, 1) + body
    aborted = lines[-1].startswith("Segmentation") or any(
        x.startswith("terminate called") for x in body)
    sig = (11 if lines[-1].startswith("Segmentation") else 6) if aborted else None
    code = None if sig else 1
    slurm = r.random() < 0.6
    rec = _rec(node if slurm else None, "batch" if slurm else "run", 0, code, sig, t_end)
    task = _write(d, f"{rec['step']}.0", lines, rec)
    return label(case_id, cls, [task], command="corpus/generate/synthetic_gpu.py",
                 source="synthetic", how=f"composed from the documented format: {how}; "
                 "surroundings varied by seed", exit_code=code, signal_=sig,
                 slurm_state="FAILED" if slurm else None,
                 slurm_reason="NonZeroExitCode" if slurm else None, kernel_log=kernel)


def cascade_case(i: int) -> dict:
    """N ranks: the root rank fails first (NCCL error, Xid, CUDA OOM, device assert); the others
    hang in their next collective and the NCCL watchdog takes them down."""
    r = random.Random(f"syn-cascade-{i}")
    kind = ["nccl_error", "gpu_hardware", "cuda_oom", "cuda_device_assert",
            "collective_timeout"][i % 5]
    case_id = f"syn-cascade-{kind}-{i:02d}"
    d = case_dir(case_id)
    per_node = r.choice([1, 2, 4, 8])
    world = per_node * r.choice([1, 2, 4]) if per_node > 1 else r.choice([2, 4])
    nodes = r.sample(NODES, max(1, world // per_node))
    root = r.randrange(world)
    t0 = BASE_T + r.randint(0, 10_000_000)
    ms = r.choice([600000, 1800000, 120000])
    seq = r.randint(100, 90000)
    tasks, kernel, how = [], None, ""
    for rank in range(world):
        node = nodes[rank // per_node]
        lines = preamble(r, rank, world)
        if rank == root and kind == "nccl_error":
            body, how = m_nccl(r, node, rank)
            code, sig, end = 1, None, t0
        elif rank == root and kind == "gpu_hardware":
            body, how, kern = m_hw(r, node, t0 - 2)
            (d / "kernel.log").write_text("\n".join(kern) + "\n")
            kernel = str((d / "kernel.log").relative_to(CORPUS))
            code, sig, end = 1, None, t0
        elif rank == root and kind == "cuda_oom":
            body, how = m_cuda_oom(r)
            code, sig, end = 1, None, t0
        elif rank == root and kind == "cuda_device_assert":
            body, how = m_device_assert(r)
            code, sig, end = 1, None, t0
        elif rank == root:  # collective_timeout: this rank stopped joining; it is killed last
            body, how = ["loading next shard ..."], "one rank stops joining collectives"
            code, sig, end = None, 9, t0 + ms / 1000 + r.uniform(5, 30)
        else:
            body = watchdog(r, rank, seq, ms)
            code, sig, end = None, 6, t0 + ms / 1000 + r.uniform(0.1, 3)
        if kind == "collective_timeout" and rank == root:
            end = t0 + ms / 1000 + 40
        rec = _rec(node, "0", rank, code, sig, end)
        tasks.append(_write(d, f"0.{rank}", lines + body, rec))
    job_code = 1 if any(t["exit_code"] for t in tasks) else None
    return label(case_id, kind, tasks, command="corpus/generate/synthetic_gpu.py",
                 source="synthetic", root_rank=root,
                 how=f"multi-rank NCCL cascade ({world} ranks on {len(nodes)} nodes): root "
                     f"rank {root} {how}; the other ranks end with the documented "
                     "ProcessGroupNCCL watchdog timeout", exit_code=job_code,
                 signal_=None if job_code else 6,
                 slurm_state="FAILED", slurm_reason="NonZeroExitCode", kernel_log=kernel)


def generate(workers: int = 2) -> list[dict]:
    labs = []
    makers = {"cuda_oom": m_cuda_oom, "cuda_error": m_cuda_error,
              "cuda_device_assert": m_device_assert, "cuda_setup": m_cuda_setup,
              "nccl_error": m_nccl, "gpu_hardware": m_hw}
    for cls, maker in makers.items():
        labs += [single_case(i, cls, maker) for i in range(30)]
    labs += [cascade_case(i) for i in range(25)]
    return labs
