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
from pathlib import Path

from corpus.gen.capture import label
from corpus.gen.compose.kit import ASYNC, DSA

ROOT = Path(__file__).resolve().parents[2]  # the set's directory; build() sets it


def case_dir(case_id: str) -> Path:
    """The case's directory, made fresh by the caller (corpus/gen/build.py)."""
    d = ROOT / "cases" / case_id
    d.mkdir(parents=True, exist_ok=True)
    return d

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
        out.append(f"{r.choice(NODES)}:{pid}:{pid + r.randint(1, 90)} [{(rank or 0) % 8}] "
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


# -------------------------------------------------------------- documented message formats
# Each helper below follows one format string of the software that prints it; corpus/README.md
# (synthetic section) names the source file each was checked against.
GIB = 1 << 30
MIB = 1 << 20


def fmt_size(n: int) -> str:
    """c10's format_size() (CUDACachingAllocator.cpp): bytes / KiB / MiB / GiB, 2 decimals."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= MIB:
        return f"{n / 1024:.2f} KiB"
    if n <= GIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"


# cudaGetErrorName -> cudaGetErrorString (CUDA runtime API, group__CUDART__TYPES)
CUDA_ERRORS = {
    "cudaErrorMemoryAllocation": "out of memory",
    "cudaErrorIllegalAddress": "an illegal memory access was encountered",
    "cudaErrorMisalignedAddress": "misaligned address",
    "cudaErrorLaunchFailure": "unspecified launch failure",
    "cudaErrorIllegalInstruction": "an illegal instruction was encountered",
    "cudaErrorLaunchOutOfResources": "too many resources requested for launch",
    "cudaErrorAssert": "device-side assert triggered",
    "cudaErrorNoDevice": "no CUDA-capable device is detected",
    "cudaErrorInsufficientDriver": "CUDA driver version is insufficient for CUDA runtime version",
    "cudaErrorNoKernelImageForDevice": "no kernel image is available for execution on the device",
    "cudaErrorDevicesUnavailable": "CUDA-capable device(s) is/are busy or unavailable",
    "cudaErrorECCUncorrectable": "uncorrectable ECC error encountered",
    "cudaErrorUnknown": "unknown error",
}
# errors c10 calls asynchronous (get_cuda_async_error_suffix): only these get the hint in >= 2.8
ASYNC_CUDA_ERRORS = {"cudaErrorLaunchFailure", "cudaErrorIllegalAddress", "cudaErrorAssert",
                     "cudaErrorIllegalInstruction", "cudaErrorMisalignedAddress"}
ASYNC_HINT, DSA_HINT = ASYNC, DSA  # torch's hints (the kit's strings)
SRC = ("../", "/pytorch/")  # how pip wheels name their build tree in __FILE__ / assert paths


def cuda_check_text(r: random.Random, name: str, new: bool | None = None) -> str:
    """c10_cuda_check_implementation's message (c10/cuda/CUDAException.cpp, CUDAMiscFunctions.cpp):
    torch 2.0-2.7 always append the asynchronous-error hint; >= 2.8 add a `Search for` line
    and give the hint only for asynchronous errors."""
    new = r.random() < 0.35 if new is None else new
    lines = [f"CUDA error: {CUDA_ERRORS[name]}"]
    if new:
        lines.append(f"Search for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
                     "group__CUDART__TYPES.html for more information.")
        lines.append(ASYNC_HINT if name in ASYNC_CUDA_ERRORS
                     else "For more detailed error information, run with CUDA_LOG_FILE=stderr")
    else:
        lines.append(ASYNC_HINT)
    return "\n".join(lines + [DSA_HINT, ""])


def cuda_check(r: random.Random, name: str) -> str:
    """The Python exception line(s): RuntimeError up to 2.7, torch.AcceleratorError after."""
    new = r.random() < 0.35
    return ("torch.AcceleratorError: " if new else "RuntimeError: ") + cuda_check_text(r, name, new)


def cpp_frames(r: random.Random, where: str, func: str, n: int = 3) -> list[str]:
    """c10::Error's backtrace as printed for an uncaught C++ exception."""
    lib = r.choice(["/usr/local/lib/python3.10/dist-packages", "/opt/conda/lib/python3.11/"
                    "site-packages"])
    out = [f"Exception raised from {func} at {r.choice(SRC)}{where} (most recent call first):",
           "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x"
           f"{r.randint(0x50, 0x9f):x} (0x7f{r.getrandbits(40):010x} in {lib}/torch/lib/libc10.so)"]
    for k in range(1, n):
        out.append(f"frame #{k}: <unknown function> + 0x{r.getrandbits(20):x} "
                   f"(0x7f{r.getrandbits(40):010x} in {lib}/torch/lib/libtorch_cuda.so)")
    return out


def glog_prefix(r: random.Random, rank: int, t: float, new: bool) -> str:
    """c10/util/Logging.cpp MessageLogger: '[E file:line] ' before 2.2, then
    '[rankN]:[EMMDD HH:MM:SS.nnnnnnnnn file:line] '."""
    line = r.randint(500, 2100)
    if not new:
        return f"[E ProcessGroupNCCL.cpp:{line}] "
    tm = time.gmtime(t)
    return (f"[rank{rank}]:[E{tm.tm_mon * 100 + tm.tm_mday}"
            f" {time.strftime('%H:%M:%S', tm)}.{r.randrange(10**9):09d} "
            f"ProcessGroupNCCL.cpp:{line}] ")


# -------------------------------------------------------------- per-class messages
def m_cuda_oom(r: random.Random) -> tuple[list[str], str]:
    total = int(r.choice([15.77, 31.74, 39.39, 79.15, 44.34, 93.10]) * GIB)  # cudaMemGetInfo total
    dev = r.randint(0, 7)
    want = r.randint(2, 10 * 1024) * 2 * MIB  # large requests are rounded to 2 MiB
    free = r.randint(2 * MIB, min(want, 900 * MIB) - MIB)
    others = [(r.randint(1000, 4_000_000), r.randint(200, 4000) * MIB)
              for _ in range(r.choice([0, 0, 0, 1, 2]))]
    own = total - free - sum(m for _, m in others) - r.randint(250, 600) * MIB
    reserved = own - r.randint(300, 900) * MIB  # the rest: CUDA context, cuBLAS workspaces
    allocated = reserved - r.randint(2, max(3, min(reserved // 4, 3 * GIB) // MIB)) * MIB
    t = r.randint(0, 5)
    if t in (0, 1):
        # PyTorch >= 2.1 (CUDACachingAllocator.cpp malloc(); process list from NVML, in NVML's
        # order); torch.OutOfMemoryError from 2.5, torch.cuda.OutOfMemoryError before
        procs = [f"Process {pid} has {fmt_size(m)} memory in use. " for pid, m in others]
        procs.insert(r.randint(0, len(procs)), "Including non-PyTorch memory, this process has "
                     f"{fmt_size(own)} memory in use. ")
        proc_info = "".join(procs) if r.random() < 0.85 else ""  # "" when NVML is unavailable
        pools = ""
        if r.random() < 0.15:
            pools = f"with {fmt_size(r.randint(64, 4096) * MIB)} allocated in private pools " \
                    "(e.g., CUDA Graphs), "
        etype = "torch.OutOfMemoryError" if t == 0 else "torch.cuda.OutOfMemoryError"
        msg = (f"{etype}: CUDA out of memory. Tried to allocate {fmt_size(want)}. GPU {dev} has a "
               f"total capacity of {fmt_size(total)} of which {fmt_size(free)} is free. "
               f"{proc_info}Of the allocated memory {fmt_size(allocated)} is allocated by "
               f"PyTorch, {pools}and {fmt_size(reserved - allocated)} is reserved by PyTorch but "
               "unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
               "documentation for Memory Management  "
               "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        return traceback(r, msg), f"{etype} (PyTorch >= 2.1 caching allocator message)"
    if t == 2:
        # PyTorch 1.x-2.0: RuntimeError until 1.12, torch.cuda.OutOfMemoryError from 1.13; the
        # max_split_size_mb hint from 1.10; "allowed" only under set_per_process_memory_fraction
        etype = r.choice(["RuntimeError", "torch.cuda.OutOfMemoryError"])
        allowed = f"{fmt_size(int(total * 0.8))} allowed; " if r.random() < 0.15 else ""
        hint = (" If reserved memory is >> allocated memory try setting max_split_size_mb to "
                "avoid fragmentation.  See documentation for Memory Management and "
                "PYTORCH_CUDA_ALLOC_CONF") if etype != "RuntimeError" or r.random() < 0.6 else ""
        msg = (f"{etype}: CUDA out of memory. Tried to allocate {fmt_size(want)} (GPU {dev}; "
               f"{fmt_size(total)} total capacity; {fmt_size(allocated)} already allocated; "
               f"{fmt_size(free)} free; {allowed}{fmt_size(reserved)} reserved in total by "
               f"PyTorch){hint}")
        return traceback(r, msg), f"{etype} CUDA out of memory (PyTorch 1.x / 2.0 format)"
    if t == 3:
        # aten/src/ATen/cuda/Exceptions.h TORCH_CUDABLAS_CHECK around cublasCreate
        msg = ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
               "`cublasCreate(handle)`")
        return traceback(r, msg), "cuBLAS handle allocation failure"
    if t == 4:
        # XLA's TfAllocatorAdapter: ResourceExhausted("Out of memory while trying to allocate N
        # bytes.")
        msg = (f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
               f"trying to allocate {r.randint(1, 40) * GIB + r.randrange(0, GIB, 256)} bytes.")
        return ["Traceback (most recent call last):", '  File "train_jax.py", line '
                f"{r.randint(40, 300)}, in <module>",
                "    state, metrics = p_train_step(state, batch)", msg], \
            "XLA RESOURCE_EXHAUSTED (JAX)"
    # cudaMalloc outside the caching allocator (cuDNN/cuBLAS workspace, a custom kernel)
    return traceback(r, cuda_check(r, "cudaErrorMemoryAllocation")), \
        "CUDA error: out of memory (c10 CUDA check)"


def m_cuda_error(r: random.Random) -> tuple[list[str], str]:
    name = r.choice(["cudaErrorIllegalAddress", "cudaErrorMisalignedAddress",
                     "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
                     "cudaErrorLaunchOutOfResources"])
    what = CUDA_ERRORS[name]
    t = r.randint(0, 4)
    if t == 0:
        return traceback(r, cuda_check(r, name)), f"c10 CUDA check: {what}"
    if t == 1:
        # an error raised where Python cannot catch it (a destructor, a side thread)
        lines = ["terminate called after throwing an instance of 'c10::Error'",
                 *("  what():  " + cuda_check_text(r, name, False)).rstrip().split("\n"),
                 *cpp_frames(r, "c10/cuda/CUDAException.cpp:43",
                             "c10_cuda_check_implementation"), ""]
        return lines, f"uncaught c10::Error in a destructor/thread: {what}"
    if t == 2:
        fn = r.choice(["cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, "
                       "c, ldc)", "cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, "
                       "CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, "
                       "CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)"])
        status = r.choice(["CUBLAS_STATUS_EXECUTION_FAILED", "CUBLAS_STATUS_INTERNAL_ERROR"])
        return traceback(r, f"RuntimeError: CUDA error: {status} when calling `{fn}`"), \
            f"cuBLAS {status}"
    if t == 3:
        # aten/src/ATen/cudnn/Exceptions.h AT_CUDNN_CHECK ("cuDNN error: " + cudnnGetErrorString)
        status = r.choice(["CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_INTERNAL_ERROR",
                           "CUDNN_STATUS_MAPPING_ERROR", "CUDNN_STATUS_NOT_SUPPORTED. This error "
                           "may appear if you passed in a non-contiguous input."])
        return traceback(r, f"RuntimeError: cuDNN error: {status}"), \
            f"cuDNN {status.split('.')[0]}"
    # ProcessGroupNCCL's watchdog polls the CUDA events and is often first to see a kernel fault
    rank = r.randint(0, 7)
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
    text = cuda_check_text(r, name, False).rstrip().split("\n")
    exc = pg + "Process group watchdog thread terminated with exception: " + text[0]
    frames = cpp_frames(r, "c10/cuda/CUDAException.cpp:43", "c10_cuda_check_implementation",
                        r.randint(1, 3)) if r.random() < 0.5 else []
    lines = [glog_prefix(r, rank, BASE_T, True) + exc, *text[1:], *frames,
             "", "terminate called after throwing an instance of 'c10::DistBackendError'",
             "  what():  " + exc, *text[1:], *frames, ""]
    return lines, f"ProcessGroupNCCL watchdog thread hit a CUDA error: {what}"


ASSERT_KERNELS = [
    ("aten/src/ATen/native/cuda/Loss.cu", 250, "nll_loss_forward_reduce_cuda_kernel_2d",
     "`t >= 0 && t < n_classes`"),
    ("aten/src/ATen/native/cuda/IndexKernel.cu", 92, "operator()",
     "`-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"`"),
    ("aten/src/ATen/native/cuda/Indexing.cu", 1146, "indexSelectLargeIndex",
     "`srcIndex < srcSelectDimSize`"),
    ("aten/src/ATen/native/cuda/ScatterGatherKernel.cu", 365, "operator()",
     "`idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"`"),
]


def m_device_assert(r: random.Random) -> tuple[list[str], str]:
    # the device runtime's __assert_fail: "%s:%d: %s: block: [%d,%d,%d], thread: [%d,%d,%d]
    # Assertion `%s` failed." - one line per failing thread, then the host-side check
    path, line, fn, cond = r.choice(ASSERT_KERNELS)
    prefix = r.choice(SRC)
    block = r.randint(0, 300)
    asserts = [f"{prefix}{path}:{line}: {fn}: block: [{block},0,0], thread: [{t},0,0] Assertion "
               f"{cond} failed." for t in sorted(r.sample(range(128), r.randint(1, 6)))]
    return asserts + traceback(r, cuda_check(r, "cudaErrorAssert")), \
        f"device-side assert in {fn}"


def _capability_warning(r: random.Random) -> list[str]:
    """torch/cuda/__init__.py _check_capability(): the wheel has no kernels for this GPU."""
    gpu, cc, archs = r.choice([
        ("NVIDIA GeForce RTX 5090", "120", "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"),
        ("NVIDIA H100 80GB HBM3", "90", "sm_37 sm_50 sm_60 sm_70 sm_75 sm_80 sm_86"),
        ("Tesla P100-PCIE-16GB", "60", "sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")])
    lib = r.choice(["/opt/conda/lib/python3.10/site-packages",
                    "/usr/local/lib/python3.11/dist-packages"])
    return [f"{lib}/torch/cuda/__init__.py:{r.randint(200, 300)}: UserWarning: ",
            f"{gpu} with CUDA capability sm_{cc} is not compatible with the current PyTorch "
            "installation.", f"The current PyTorch install supports CUDA capabilities {archs}.",
            f"If you want to use the {gpu} GPU with PyTorch, please check the instructions at "
            "https://pytorch.org/get-started/locally/", "",
            "  warnings.warn("]


def m_cuda_setup(r: random.Random) -> tuple[list[str], str]:
    t = r.randint(0, 8)
    if t == 0:
        return traceback(r, "RuntimeError: No CUDA GPUs are available", False), "no GPUs visible"
    if t == 1:
        return traceback(r, "AssertionError: Torch not compiled with CUDA enabled", False), \
            "CPU-only torch build"
    if t == 2:
        # c10/cuda/CUDAFunctions.cpp device_count_impl, cudaErrorInsufficientDriver with a driver
        v = r.choice([11040, 11020, 10020, 12000])
        return traceback(r, f"RuntimeError: The NVIDIA driver on your system is too old (found "
                            f"version {v}). Please update your GPU driver by downloading and "
                            "installing a new version from the URL: "
                            "http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
                            "https://pytorch.org to install a PyTorch version that has been "
                            "compiled with your version of the CUDA driver.", False), \
            "driver too old"
    if t == 3:
        warn = _capability_warning(r) if r.random() < 0.7 else []
        return warn + traceback(r, cuda_check(r, "cudaErrorNoKernelImageForDevice")), \
            "no kernel image for arch"
    if t == 4:
        return traceback(r, cuda_check(r, "cudaErrorDevicesUnavailable")), \
            "device busy (exclusive process mode)"
    if t == 5:
        lib = r.choice(["/opt/conda/lib/python3.10/site-packages",
                        "/usr/local/lib/python3.11/dist-packages"])
        return [f"{lib}/torch/cuda/__init__.py:{r.randint(100, 180)}: UserWarning: CUDA "
                "initialization: CUDA unknown error - this may be due to an incorrectly set up "
                "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program "
                "start. Setting the available devices to be zero. (Triggered internally at "
                f"{r.choice(SRC)}c10/cuda/CUDAFunctions.cpp:{r.choice([108, 109])}.)",
                "  return torch._C._cuda_getDeviceCount() > 0"] + traceback(
            r, "RuntimeError: No CUDA GPUs are available", False), "CUDA init unknown error"
    if t == 6:
        return traceback(r, "RuntimeError: Found no NVIDIA driver on your system. Please check "
                            "that you have an NVIDIA GPU and installed a driver from "
                            "http://www.nvidia.com/Download/index.aspx", False), "no driver"
    if t == 7:
        return traceback(r, cuda_check(r, "cudaErrorNoDevice")), "no CUDA-capable device"
    return traceback(r, cuda_check(r, "cudaErrorInsufficientDriver")), \
        "driver older than the CUDA runtime"


NCCL_VERSIONS = ["2.18.1", "2.19.3", "2.20.5", "2.21.5", "2.26.2"]
# ncclGetErrorString (NCCL src/init.cc) and c10d's getNcclErrorDetailStr (NCCLUtils.cpp)
NCCL_RESULTS = {
    "ncclSystemError": ("unhandled system error (run with NCCL_DEBUG=INFO for details)",
                        "System call (e.g. socket, malloc) or external library call failed or "
                        "device error. "),
    "ncclUnhandledCudaError": ("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                               "Call to CUDA function failed."),
    "ncclInternalError": ("internal error - please report this issue to the NCCL developers",
                          "Internal check failed."),
    "ncclRemoteError": ("remote process exited or there was a network error",
                        "A call failed possibly due to a network error or a remote process "
                        "exiting prematurely."),
}


def nccl_warn(r: random.Random, node: str, pid: int, dev: int, where: str, msg: str,
              ver: str, t: float) -> list[str]:
    """NCCL src/debug.cc: a WARN starts with a newline; recent releases (here 2.26) stamp WARN
    lines by default (NCCL_DEBUG_TIMESTAMP_LEVELS=WARN)."""
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S] ", time.gmtime(t)) if ver >= "2.23" else ""
    return ["", f"{stamp}{node}:{pid}:{pid + r.randint(1, 90)} [{dev}] {where} NCCL WARN {msg}"]


def m_nccl(r: random.Random, node: str, rank: int) -> tuple[list[str], str]:
    ver = r.choice(NCCL_VERSIONS)
    pid = r.randint(1000, 90000)
    dev = rank % 8
    peer = (f"10.{r.randint(0, 9)}.{r.randint(0, 255)}.{r.randint(1, 254)}"
            f"<{r.randint(30000, 60000)}>")
    t = r.randint(0, 3)
    if t == 0:
        # transport/net_ib.cc: a failed work completion is the peer's or the fabric's fault
        last = (f"NET/IB : Got completion from peer {peer} with status=12 opcode=0 len=0 vendor "
                f"err 129 (Recv) localGid ::ffff:10.0.0.{r.randint(1, 254)} remoteGids::ffff:"
                f"10.0.0.{r.randint(1, 254)} hca mlx5_{r.randint(0, 3)}")
        where, result = f"transport/net_ib.cc:{r.randint(1200, 1700)}", "ncclRemoteError"
        how = "NCCL IB completion error -> ncclRemoteError"
    elif t == 1:
        last = f"socketStartConnect: Connect to {peer} failed : Software caused connection abort"
        where, result = f"misc/socket.cc:{r.randint(400, 600)}", "ncclSystemError"
        how = "NCCL bootstrap socket failure -> ncclSystemError"
    elif t == 2:
        last = "Cuda failure 'an illegal memory access was encountered'"
        where, result = f"enqueue.cc:{r.randint(100, 1500)}", "ncclUnhandledCudaError"
        how = "ncclUnhandledCudaError"
    else:
        last = f"Proxy Call to rank {r.randint(0, 15)} failed (Connect)"
        where, result = f"proxy.cc:{r.randint(900, 1300)}", "ncclInternalError"
        how = "ncclInternalError"
    warn = nccl_warn(r, node, pid, dev, where, last, ver, BASE_T) if r.random() < 0.8 else []
    # C10D_NCCL_CHECK: "NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version X\n
    # <detail>\nLast error:\n<ncclGetLastError>"; DistBackendError from torch 2.1
    if r.random() < 0.7:
        etype, top = "torch.distributed.DistBackendError", r.choice(SRC)
        src = r.choice(["ProcessGroupNCCL.cpp", "NCCLUtils.hpp", "NCCLUtils.cpp"])
    else:  # torch 2.0 and older
        etype, top, src = "RuntimeError", "../", r.choice(["ProcessGroupNCCL.cpp", "NCCLUtils.hpp"])
    text, detail = NCCL_RESULTS[result]
    msg = (f"{etype}: NCCL error in: {top}torch/csrc/distributed/c10d/{src}:"
           f"{r.randint(100, 2100)}, {text}, NCCL version {ver}\n{result}: {detail}\n"
           f"Last error:\n{last}")
    return warn + traceback(r, msg), how


def watchdog(r: random.Random, rank: int, seq: int, ms: int) -> list[str]:
    """ProcessGroupNCCL's watchdog on a rank whose collective never completed: checkTimeout's
    message, the teardown lines, then std::terminate on the rethrown exception."""
    op = r.choice(["ALLREDUCE", "ALLGATHER", "_ALLGATHER_BASE", "REDUCE_SCATTER", "BROADCAST"])
    n = r.choice([1, 1024, 16777216, 4194304])
    era = r.choice(["1.x", "2.0", "2.4"])
    numel = "" if era == "1.x" else f", NumelIn={n}, NumelOut={n}"
    work = f"WorkNCCL(SeqNum={seq}, OpType={op}{numel}, Timeout(ms)={ms})"
    timeout = (f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for "
               f"{ms + r.randint(1, 90)} milliseconds before timing out.")
    t = BASE_T + r.randint(0, 10_000_000)
    def pre() -> str:  # each LOG(ERROR) has its own source line and time
        return glog_prefix(r, rank, t, era == "2.4")

    work_pre = f"[Rank {rank}] " if era == "2.4" else ""  # WorkNCCL::logPrefix() from 2.4
    lines = [pre() + timeout,
             pre() + work_pre + "Some NCCL operations have failed or timed out. Due to the "
             "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
             "corrupted/incomplete data.",
             pre() + work_pre + "To avoid data inconsistency, we are taking the entire process "
             "down."]
    if era != "2.4":
        return lines + ["terminate called after throwing an instance of 'std::runtime_error'",
                        f"  what():  {timeout}"]
    exc = (f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread "
           f"terminated with exception: {timeout}")
    frames = cpp_frames(r, "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
                        f"{r.randint(560, 700)}", "checkTimeout")
    return lines + [pre() + exc, *frames, "",
                    "terminate called after throwing an instance of 'c10::DistBackendError'",
                    f"  what():  {exc}", *frames, ""]


# Xid numbers and texts: NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors) and the
# dynamic page retirement guide; the CUDA error the task then sees
XIDS = [
    (79, "GPU has fallen off the bus.", "cudaErrorLaunchFailure"),
    (48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
         "partition 6, subpartition 0.", "cudaErrorECCUncorrectable"),
    (94, "Contained: SM (0x1). RST: No, D-RST: No", "cudaErrorECCUncorrectable"),
    (95, "Uncontained: FBHUB. RST: Yes, D-RST: No", "cudaErrorECCUncorrectable"),
    (74, "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
     "cudaErrorIllegalAddress"),
    (119, "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
          "(GSP_RM_CONTROL) (0x20800a4c 0x4).", "cudaErrorUnknown"),
]


def m_hw(r: random.Random, node: str, t0: float) -> tuple[list[str], str, list[str]]:
    xid, text, err = r.choice(XIDS)
    bus = r.choice(['07', '0f', '47', '4e', '87', '90', 'b7', 'bd'])
    # drivers before ~470 print "Xid (0000:bb:00)", later ones "Xid (PCI:0000:bb:00)"; the
    # process is named when the driver knows it, "'<unknown>'" when the GPU is gone
    old = r.random() < 0.2
    pci = f"0000:{bus}:00" if old else f"PCI:0000:{bus}:00"
    pid = r.randint(1000, 90000)
    if xid == 79:
        who = "" if old else "pid='<unknown>', name=<unknown>, "
    else:
        who = f"pid={pid}, " if old else f"pid={pid}, name=python, "
    fmt = r.choice(["journal", "dmesg"])
    up = r.uniform(1e5, 5e6)

    def k(msg: str) -> str:
        if fmt == "dmesg":
            return f"[{up:12.6f}] {msg}"
        return f"{time.strftime('%b %d %H:%M:%S', time.gmtime(t0))} {node} kernel: {msg}"

    uuid = (f"GPU-{r.getrandbits(32):08x}-{r.getrandbits(16):04x}-{r.getrandbits(16):04x}-"
            f"{r.getrandbits(16):04x}-{r.getrandbits(48):012x}")
    kern = [k(f"NVRM: GPU at PCI:0000:{bus}:00: {uuid}")]
    if xid == 94 and r.random() < 0.5:  # A100+: the row remapper records the bad row first
        kern.append(k(f"NVRM: Xid ({pci}): 63, {who}Row Remapper: New row marked for remapping, "
                      "reset gpu to activate."))
    kern.append(k(f"NVRM: Xid ({pci}): {xid}, {who}{text}"))
    if xid == 48 and r.random() < 0.5:
        kern.append(k(f"NVRM: Xid ({pci}): 63, {who}Dynamic Page Retirement: New retired page, "
                      f"reload the driver to activate. (0x{r.getrandbits(36):09x})"))
    if xid == 79:
        kern.append(k(f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus."))
    task = traceback(r, cuda_check(r, err)) if r.random() < 0.8 else [
        "Segmentation fault (core dumped)" if r.random() < 0.5 else
        "RuntimeError: " + cuda_check_text(r, err, False).split("\n")[0]]
    return task, f"Xid {xid} in kernel log; task shows '{CUDA_ERRORS[err]}'", kern


# -------------------------------------------------------------- writing cases
def _write(d, name: str, lines: list[str], rec: dict) -> dict:
    (d / f"{name}.log").write_text("\n".join(lines) + "\n")
    (d / f"{name}.exit").write_text(json.dumps(rec) + "\n")
    return {"log": str((d / f"{name}.log").relative_to(ROOT)), "rank": rec["rank"],
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
        kernel = str((d / "kernel.log").relative_to(ROOT))
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
            kernel = str((d / "kernel.log").relative_to(ROOT))
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


MAKERS = {"cuda_oom": m_cuda_oom, "cuda_error": m_cuda_error,
          "cuda_device_assert": m_device_assert, "cuda_setup": m_cuda_setup,
          "nccl_error": m_nccl, "gpu_hardware": m_hw}


def build(root: Path, d: Path, c: dict) -> dict:
    """One case of a set file: `synth: tuning_single` (params cls, i) or `tuning_cascade` (i);
    its id is the one the seed makes, and `d` its directory."""
    global ROOT
    ROOT = root
    p = c["params"]
    if c["synth"] == "tuning_single":
        lab = single_case(p["i"], p["cls"], MAKERS[p["cls"]])
    else:
        lab = cascade_case(p["i"])
    if lab["id"] != c["id"]:
        raise ValueError(f"synthetic case {c['id']} builds {lab['id']}")
    return lab
