"""Composed tuning-corpus cases (templates `f6_*`, ids `f6m-*`) for the GPU-only wording
families held-out set 6 missed: NCCL's shared-memory transport out of /dev/shm, GPU allocators
outside torch (ONNX Runtime's CUDA provider, TensorRT), driver-API error wrappers (numba, cupy),
kernel Xids of the GSP / recovery-action era. Each message follows its source's format (cited
per template and in corpus/README.md); the surroundings reuse kit.py's helpers and vary
with the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import ASYNC, SITE, _tb, _user_frames, compose


def _nccl_prefix(rng: random.Random) -> str:
    host = rng.choice(["gpu-a07", "dgx-21", "hgx-h100-4", "node-g12"])
    pid, tid = rng.randrange(1000, 90000), rng.randrange(1000, 90000)
    return f"{host}:{pid}:{tid} [{rng.randrange(0, 8)}]"


def nccl_shm(rng: random.Random, p: dict) -> tuple[str, None]:
    # NVIDIA/nccl src/misc/shmutils.cc ncclShmOpen: WARN "Error while %s shared memory segment
    # %s (size %ld), error: %s (%d)" after a failed fallocate/mmap; torch then raises
    # DistBackendError "NCCL error in: ..., unhandled system error" with NCCL's "Last error:"
    seg = "/dev/shm/nccl-" + "".join(rng.choice("abcdefghijkLMNOPQ0123456789") for _ in range(6))
    size = rng.choice([9637888, 33030144, 4194304])
    if p["kind"] == "create_segment":
        warn = (f"Error while creating shared memory segment {seg} (size {size}), error: "
                "No space left on device (28)")
    else:  # "map": the mmap of the segment fails
        warn = f"Error: Could not map {seg} size {size + 4}, error: No space left on device (28)"
    pre = _nccl_prefix(rng)
    frames = _user_frames(rng)[:2] + [
        (f"{SITE}/torch/distributed/c10d_logger.py", "wrapper", "return func(*args, **kwargs)"),
        (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce",
         "work = group.allreduce([tensor], opts)")]
    exc = (f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
           f"ProcessGroupNCCL.cpp:{rng.randrange(1200, 3000)}, unhandled system error (run with "
           f"NCCL_DEBUG=INFO for details), NCCL version "
           f"2.{rng.randrange(18, 24)}.{rng.randrange(1, 6)}\n"
           "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
           f"device error. \nLast error:\n{warn}")
    return f"{pre} NCCL WARN {warn}\n" + _tb(rng, frames, exc), None


def cuda_oom(rng: random.Random, p: dict) -> tuple[str, None]:
    if p["kind"] == "ort_cuda_call":
        # onnxruntime/core/providers/cuda/cuda_call.cc: "CUDA failure %d: %s ; GPU=%d ;
        # hostname=%s ; file=%s ; line=%d ; expr=%s;" from cudaMalloc in cuda_allocator.cc
        host = rng.choice(["gpu-a07", "infer-3", "l40s-2"])
        msg = (f"CUDA failure 2: out of memory ; GPU=0 ; hostname={host} ; "
               "file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_allocator.cc ; "
               f"line={rng.randrange(40, 60)} ; expr=cudaMalloc((void**)&p, size);")
        head = ("loaded detector.onnx with providers ['CUDAExecutionProvider', "
                "'CPUExecutionProvider']\n")
        frames = [("/home/u/infer/run.py", "<module>", "out = sess.run(None, feeds)"),
                  (f"{SITE}/onnxruntime/capi/onnxruntime_inference_collection.py", "run",
                   "return self._sess.run(output_names, input_feed, run_options)")]
        exc = ("onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : "
               + msg)
        return head + _tb(rng, frames, exc), None
    # TensorRT's default GPU allocator (the builder/runtime logger's [TRT] lines): "Requested
    # amount of GPU memory (N bytes) could not be allocated"; the engine build then fails
    need = rng.choice([4294967296, 8589934592, 2147483648])
    head = (f"[TRT] [I] [MemUsageChange] Init CUDA: CPU +{rng.randrange(2, 20)}, GPU +0, "
            f"now: CPU {rng.randrange(200, 900)}, GPU {rng.randrange(20000, 80000)} (MiB)\n"
            f"[TRT] [W] Requested amount of GPU memory ({need} bytes) could not be allocated. "
            "There may not be enough free memory for allocation to succeed.\n"
            f"[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::{rng.randrange(100, 160)}] "
            "Error Code 2: OutOfMemory (no further information)\n")
    frames = [("/home/u/deploy/build_engine.py", "<module>", "engine = build(onnx_path)"),
              ("/home/u/deploy/build_engine.py", "build",
               "raise RuntimeError('engine build failed')")]
    return head + _tb(rng, frames, "RuntimeError: engine build failed"), None


def cuda_error(rng: random.Random, p: dict) -> tuple[str, None]:
    if p["kind"] == "numba_unknown":
        # numba/cuda/cudadrv/driver.py _check_ctypes_error: CudaAPIError(code, "Call to %s
        # results in %s") with UNKNOWN_CUDA_ERROR for a code numba's enum map lacks
        fn = rng.choice(["cuLaunchKernel", "cuMemcpyHtoD", "cuStreamSynchronize"])
        frames = [("/home/u/sim/step.py", "<module>", "advance[blocks, threads](state, dt)"),
                  (f"{SITE}/numba/cuda/dispatcher.py", "launch", "driver.launch_kernel("),
                  (f"{SITE}/numba/cuda/cudadrv/driver.py", "safe_cuda_api_call",
                   "self._check_ctypes_error(fname, retcode)"),
                  (f"{SITE}/numba/cuda/cudadrv/driver.py", "_check_ctypes_error",
                   "raise CudaAPIError(retcode, msg)")]
        code = rng.choice([999, 710, 716])
        exc = (f"numba.cuda.cudadrv.driver.CudaAPIError: [{code}] Call to {fn} results in "
               "UNKNOWN_CUDA_ERROR")
        return _tb(rng, frames, exc), None
    # cupy_backends/cuda/api/driver.pyx check_status: CUDADriverError("%s: %s" % (name, msg))
    frames = [("/home/u/pipeline/kernels.py", "<module>", "out = fused(x, y)"),
              ("cupy/_core/raw.pyx", "cupy._core.raw.RawKernel.__call__", ""),
              ("cupy/cuda/function.pyx", "cupy.cuda.function.Function.__call__", ""),
              ("cupy_backends/cuda/api/driver.pyx",
               "cupy_backends.cuda.api.driver.check_status", "")]
    exc = ("cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_INVALID_HANDLE: "
           "invalid resource handle")
    return _tb(rng, frames, exc).replace("\n    \n", "\n"), None


def gpu_hw(rng: random.Random, p: dict) -> tuple[str, str]:
    # NVIDIA's Xid catalogue: 143 GPU initialization failure; 154 GPU recovery action changed
    # (the driver's "from 0x%x (%s) to 0x%x (%s)"); what the job saw is a CUDA error
    bus = f"PCI:0000:{rng.choice(['1b', '3b', '65', 'ca'])}:00"
    t = rng.randrange(10000, 900000)
    if p["kind"] == "xid143":
        kern = (f"[{t}.120331] NVRM: Xid ({bus}): 143, GPU Initialization Failure\n"
                f"[{t}.120402] NVRM: GPU at {bus} has been disabled\n")
        job = f"RuntimeError: CUDA error: unspecified launch failure\n{ASYNC}"
    else:
        kern = (f"[{t}.501223] NVRM: Xid ({bus}): 119, pid={rng.randrange(2000, 90000)}, "
                "name=python, Timeout after 6s of waiting for RPC response from GPU1 GSP! "
                "Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).\n"
                f"[{t + 2}.000117] NVRM: Xid ({bus}): 154, GPU recovery action changed from "
                "0x0 (None) to 0x2 (Node Reboot Required)\n")
        job = ("RuntimeError: CUDA error: unknown error\nCUDA kernel errors might be "
               "asynchronously reported at some other API call, so the stacktrace below might "
               "be incorrect.")
    return _tb(rng, _user_frames(rng), job), kern


TEMPLATES = {"f6_nccl_shm": nccl_shm, "f6_cuda_oom": cuda_oom, "f6_cuda_error": cuda_error,
             "f6_gpu_hw": gpu_hw}


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f6_*` case into `d`; return its label."""
    return compose(root, d, c, single=TEMPLATES, steps=(2, 7), end_last=True)
