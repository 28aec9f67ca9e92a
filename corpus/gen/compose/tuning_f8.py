"""Composed tuning-corpus cases (templates `f8_*`, ids `f8c-*`) for the GPU-only wording
families held-out set 8 missed: CUDA runtime / driver error names and codes printed by a
program's own check macro, GPU allocators of other frameworks raising their own memory errors,
Horovod's stall inspector and its shutdown error, and the GPU stack of a job's container
(libnvidia-container under enroot/pyxis, docker's --gpus, apptainer --nv). Each message follows
its source's format (cited per template and in corpus/README.md); the surroundings reuse
kit.py's helpers and vary with the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import (
    SITE,
    _pre,
    _rank_task,
    _tb,
    _user_frames,
    catalogue,
    compose,
    render,
)

CATALOGUE = catalogue(__name__)

# CUDA's enums (driver_types.h cudaError, cuda.h CUresult): kind -> (code, runtime name or
# driver name, cudaGetErrorString's words)
_CODES = {
    "illegal_address": (700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    "misaligned": (716, "cudaErrorMisalignedAddress", "misaligned address"),
    "launch_timeout": (702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"),
    "alloc": (2, "cudaErrorMemoryAllocation", "out of memory"),
    "no_device": (100, "cudaErrorNoDevice", "no CUDA-capable device is detected"),
    "old_driver": (35, "cudaErrorInsufficientDriver",
                   "CUDA driver version is insufficient for CUDA runtime version"),
    "no_image": (209, "cudaErrorNoKernelImageForDevice",
                 "no kernel image is available for execution on the device"),
    "assert": (710, "cudaErrorAssert", "device-side assert triggered"),
    "ecc": (214, "cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"),
}
_DRIVER = {
    "invalid_pc": ("CUDA_ERROR_INVALID_PC", "invalid program counter"),
    "no_binary": ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on "
                  "the device"),
    "nvlink": ("CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during "
               "the execution"),
    "launch_failed": ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
}


def _sweeps(rng: random.Random, what: str) -> str:
    """A native solver's own progress lines (no torch preamble: a C++/CUDA program)."""
    n = rng.choice([256, 384, 512])
    gpu = rng.choice(["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB"])
    out = [f"{what}: grid {n}^3, {rng.choice([2000, 4000, 8000])} iterations, device 0: {gpu}"]
    r = rng.uniform(1e-2, 1e-1)
    for i in range(rng.randrange(3, 7)):
        r *= rng.uniform(0.3, 0.8)
        out.append(f"iter {i * 250:6d}  residual {r:.3e}")
    return "\n".join(out) + "\n"


def cuda_name(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    what = rng.choice(["poisson3d", "lbm-d3q19", "md-verlet", "sparse-cg"])
    src = rng.choice(["kernels.cu", "solver.cu", "stencil.cu", "reduce.cu"])
    line = rng.randrange(40, 400)
    if p.get("shape") == "gpuassert":
        # the widespread gpuErrchk macro: fprintf(stderr, "GPUassert: %s %s %d\n",
        # cudaGetErrorString(code), file, line)
        _, _, words = _CODES[kind]
        return _sweeps(rng, what) + f"GPUassert: {words} {src} {line}\n"
    if p.get("shape") == "driver":
        # a driver-API program: cuGetErrorName / cuGetErrorString after a failed call
        name, words = _DRIVER[kind]
        call = rng.choice(["cuLaunchKernel", "cuCtxSynchronize", "cuMemcpyDtoH_v2"])
        return (_sweeps(rng, what) + f"[{what}] fatal: {call} failed at {src}:{line}: "
                f"{name} ({words})\nterminate called without an active exception\n")
    if p.get("shape") == "code_only":
        # a wrapper that prints only the numeric cudaError_t
        code, _, _ = _CODES[kind]
        return (_sweeps(rng, what) + f"{what}: CUDA error {code} returned by "
                f"cudaStreamSynchronize(stream) ({src}:{line})\n")
    # the CUDA samples' helper_cuda.h check(): "CUDA error at %s:%d code=%d(%s) \"%s\" \n"
    # with _cudaGetErrorEnum's name
    code, name, _ = _CODES[kind]
    call = rng.choice(["cudaDeviceSynchronize()", "cudaMemcpy(h_out, d_out, bytes, "
                       "cudaMemcpyDeviceToHost)", "cudaMalloc((void **)&d_grid, bytes)",
                       "cudaGetLastError()"])
    return _sweeps(rng, what) + f'CUDA error at {src}:{line} code={code}({name}) "{call}" \n'


def gpu_alloc(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    g = rng.randrange(0, 8)
    if kind in CATALOGUE["gpu_alloc"]:  # the message texts: catalogue/tuning_f8.yaml
        return render(CATALOGUE["gpu_alloc"][kind], {**globals(), **locals()})
    if kind == "paddle":
        # PaddlePaddle: the Python MemoryError (its ResourceExhausted), the C++ traceback, then
        # the summary of paddle/fluid/memory/allocation/cuda_allocator.cc "Out of memory error
        # on GPU %d. Cannot allocate %s memory on GPU %d, %s memory has been allocated and
        # available memory is only %s."
        frames = [("/work/PaddleNLP/run_pretrain.py", "<module>", "do_train(args)"),
                  ("/work/PaddleNLP/run_pretrain.py", "do_train", "loss.backward()"),
                  (f"{SITE}/paddle/base/dygraph/tensor_patch_methods.py", "backward",
                   "core.eager.run_backward([self], grad_tensor, retain_graph)")]
        need, used = rng.choice([(1.5, 38.9), (4.0, 75.2), (0.75, 14.6)])
        summary = (
            "MemoryError: \n\n" + "-" * 38 + "\nC++ Traceback (most recent call last):\n"
            + "-" * 38 + "\n0   egr::Backward(std::vector<paddle::Tensor> const&, ...)\n"
            "1   paddle::memory::allocation::Allocator::Allocate(unsigned long)\n"
            "2   paddle::memory::allocation::StatAllocator::AllocateImpl(unsigned long)\n"
            "3   paddle::memory::allocation::CUDAAllocator::AllocateImpl(unsigned long)\n"
            "4   common::enforce::EnforceNotMet::EnforceNotMet(common::ErrorSummary const&, "
            "char const*, int)\n\n" + "-" * 22 + "\nError Message Summary:\n" + "-" * 22 + "\n"
            f"ResourceExhaustedError: \n\nOut of memory error on GPU {g}. Cannot allocate "
            f"{need:.6f}GB memory on GPU {g}, {used:.6f}GB memory has been allocated and "
            f"available memory is only {rng.uniform(0.1, 1.0):.6f}GB.\n\n"
            f"Please check whether there is any other process using GPU {g}.\n"
            "1. If yes, please stop them, or start PaddlePaddle on another GPU.\n"
            "2. If no, please decrease the batch size of your model. \n"
            " (at /paddle/paddle/phi/core/memory/allocation/cuda_allocator.cc:"
            f"{rng.randrange(70, 90)})\n")
        return _tb(rng, frames, summary.rstrip("\n"))
    # CuPy's memory pool (cupy/cuda/memory.pyx OutOfMemoryError: "Out of memory allocating
    # {:,} bytes (allocated so far: {:,} bytes).")
    frames = [("/home/u/sim/fft_run.py", "<module>", "spec = cp.fft.rfftn(vol)"),
              (f"{SITE}/cupy/fft/_fft.py", "_exec_fftn", "out = _get_fftn_out(a, ...)")]
    need = rng.choice([17179869184, 8589934592, 34359738368])
    exc = (f"cupy.cuda.memory.OutOfMemoryError: Out of memory allocating {need:,} bytes "
           f"(allocated so far: {need * 3:,} bytes).")
    return _tb(rng, frames, exc)


_HVD_SHUTDOWN = ("Horovod has been shut down. This was caused by an exception on one of the ranks "
                 "or an attempt to allreduce, allgather or broadcast a tensor after one of the "
                 "ranks finished execution. If the shutdown was caused by an exception, you "
                 "should see the exception in the log before the first shutdown message.")


def _stall(rng: random.Random, stamp: str, missing: int, shutdown: int | None) -> str:
    """horovod/common/stall_inspector.cc CheckForStalledTensors: the warning, "Missing ranks:"
    (a rank marked "!" past the shutdown time) and, past it, "Will shutdown." (an ERROR)."""
    lvl = "E" if shutdown else "W"
    tensors = rng.choice([["allreduce.grad.encoder.layer.3.weight", "allreduce.grad.head.bias"],
                          ["DistributedSGD_Allreduce/cond/HorovodAllreduce_grads_12_0"]])
    txt = (f"[{stamp}: {lvl} /tmp/pip-req-build-x1/horovod/common/stall_inspector.cc:"
           f"{105 if lvl == 'W' else 126}] One or more tensors were submitted to be reduced, "
           "gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for "
           f"more than {rng.choice([60, 120])} seconds. This may indicate that different ranks "
           "are trying to submit different tensors or that only subset of ranks is submitting "
           "tensors, which will cause deadlock. \nMissing ranks:\n"
           f"{missing}{'!' if shutdown else ''}: [{', '.join(tensors)}]\n")
    if shutdown:
        txt += (f"One or more rank (marked by \"!\") is stalled for longer than {shutdown} "
                "seconds. Will shutdown.\n")
    return txt


def horovod(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    day, hour = rng.randrange(10, 28), rng.randrange(0, 9)
    stamp, later = (f"2026-11-{day} 0{hour}:{m}:{rng.randrange(10, 59)}."
                    f"{rng.randrange(100000, 999999)}" for m in (rng.randrange(10, 40), 49))
    frames = _user_frames(rng)[:2] + [
        (f"{SITE}/horovod/torch/mpi_ops.py", "synchronize",
         "mpi_lib.horovod_torch_wait_and_clear(handle)")]
    exc = "horovod.common.exceptions.HorovodInternalError: " + _HVD_SHUTDOWN
    if kind in CATALOGUE["horovod"]:  # the message texts: catalogue/tuning_f8.yaml
        return render(CATALOGUE["horovod"][kind], {**globals(), **locals()})
    # the shutdown error alone: its cause was on another rank whose log is not here
    return _tb(rng, frames, exc)


def horovod_peer(rng: random.Random, p: dict, d: Path, root: Path, cid: str,
                 tr: str | None) -> tuple[list, int]:
    """Two ranks: rank 1 runs out of GPU memory; rank 0's next allreduce fails with Horovod's
    shutdown error (SHUT_DOWN_ERROR) - a symptom of rank 1's error."""
    end = 1796000000.0 + rng.randrange(0, 10**6)
    frames = _user_frames(rng)
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
           "total capacity of 79.10 GiB of which 1.21 GiB is free. Of the allocated memory 74.37 "
           "GiB is allocated by PyTorch, and 1.93 GiB is reserved by PyTorch but unallocated.")
    t1 = _rank_task(root, d, 1, _pre(rng, "hvd", 4, rank=1) + _tb(rng, frames, oom), tr, cid,
                    1, None, end, "gpu-n02")
    hv = _user_frames(rng)[:2] + [(f"{SITE}/horovod/torch/mpi_ops.py", "synchronize",
                                   "mpi_lib.horovod_torch_wait_and_clear(handle)")]
    t0 = _rank_task(root, d, 0, _pre(rng, "hvd", 4, rank=0) + _tb(
        rng, hv, "horovod.common.exceptions.HorovodInternalError: " + _HVD_SHUTDOWN), tr, cid,
        1, None, end + 2.5, "gpu-n01")
    return [t0, t1], 1


def container(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    img = rng.choice(["nvcr.io#nvidia/pytorch:24.10-py3", "nvcr.io#nvidia/tensorflow:24.03-tf2-py3",
                      "docker://ghcr.io#lab/train:cu124"])
    err = "slurmstepd: error: pyxis:"
    if kind in CATALOGUE["container"]:  # the message texts: catalogue/tuning_f8.yaml
        return render(CATALOGUE["container"][kind], {**globals(), **locals()})
    # image_dns: the registry's name cannot be resolved from the compute node (curl error 6)
    return (f"pyxis: importing docker image: {img}\n{err} child 3917 failed with error code: 1\n"
            f"{err} failed to import docker image\n{err} printing enroot log file:\n"
            f"{err}     curl: (6) Could not resolve host: nvcr.io\n"
            f"{err}     [ERROR] Could not process JSON input\n{err} couldn't start container\n")


SINGLE = {"f8_cuda_name": cuda_name, "f8_gpu_alloc": gpu_alloc, "f8_horovod": horovod,
          "f8_container": container}
# logs that are the program's or the runtime's own output from their first line
PLAIN = ("illegal_address", "misaligned", "launch_timeout", "alloc", "no_device", "old_driver",
         "no_image", "assert", "ecc", "invalid_pc", "no_binary", "nvlink", "launch_failed",
         "enroot_libnvml", "nvcli_requirement", "docker_caps", "nvml_mismatch", "apptainer_nv",
         "image_auth", "image_dns")


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f8_*` case into `d`; return its label."""
    return compose(root, d, c, single=SINGLE, multi={"f8_horovod_peer": horovod_peer},
                   plain=PLAIN)
