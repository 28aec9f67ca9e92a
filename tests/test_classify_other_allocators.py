"""Resource and backend wordings held-out set 6 showed the classifier did not know
(corpus/holdout6/misses-once.txt): other libraries' allocators failing on host memory (Arrow,
jemalloc) and on GPU memory (ONNX Runtime's arena and CUDA calls, TensorRT, pycuda); ENOSPC in
torch's or NCCL's shared-memory segments (/dev/shm is not the job's disk); a library built
without, or unable to load, its GPU backend (LightGBM, numba); driver-API error wrappers
(numba, cupy, pycuda); kernel Xids of the GSP / recovery-action era; short reads of serialized
arrays and models (numpy/joblib, LightGBM). Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import verdict

TB = ('Traceback (most recent call last):\n  File "/srv/job/main.py", line 41, in <module>\n'
      '    main()\n  File "/srv/job/main.py", line 30, in main\n    out = step(batch)\n')


# ---- host memory: other libraries' allocators ----

@pytest.mark.parametrize("line", [
    "pyarrow.lib.ArrowMemoryError: realloc of size 8589934592 failed",
    "ArrowMemoryError: malloc of size 68719476736 failed",
    "<jemalloc>: Error in malloc(): out of memory. Requested: 34359738368, active: 1073741824",
    "OSError: [Errno 12] Cannot allocate memory",
    "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 74.5 GiB for an array with "
    "shape (100000, 100000) and data type float64",
])
def test_host_allocators_of_other_libraries_are_host_oom(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "reading shard 3 of 12\n" + TB + line + "\n")
    assert v.cls == "host_oom", v.to_json()


def test_a_traceback_cut_inside_arrows_allocator_is_host_oom(tmp_path: Path) -> None:
    log = (TB + '  File "pyarrow/io.pxi", line 1702, in pyarrow.lib.allocate_buffer\n'
           '  File "pyarrow/error.pxi", line 92, in pyarrow.lib.check_status\n')
    v = verdict(tmp_path, log)
    assert v.cls == "host_oom", v.to_json()


def test_allocator_words_in_a_benign_line_stay_success(tmp_path: Path) -> None:
    v = verdict(tmp_path, "arrow memory pool: jemalloc (malloc of size classes tuned)\ndone\n",
                exit_code=0)
    assert v.cls == "success", v.to_json()


# ---- GPU memory: non-torch allocators ----

ORT_ARENA = ("2026-04-01 10:00:00.1 [E:onnxruntime:, sequential_executor.cc:516 ExecuteKernel] "
             "Non-zero status code returned while running Conv node. Name:'/stem/conv' Status "
             "Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* "
             "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
             "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of "
             "size 805306368\n")


def test_onnxruntime_arena_on_a_cuda_provider_is_cuda_oom(tmp_path: Path) -> None:
    log = ("*************** EP Error ***************\nsession providers: "
           "['CUDAExecutionProvider', 'CPUExecutionProvider']\n" + ORT_ARENA)
    v = verdict(tmp_path, log)
    assert v.cls == "cuda_oom", v.to_json()


def test_onnxruntime_arena_without_a_gpu_is_host_oom(tmp_path: Path) -> None:
    log = "session providers: ['CPUExecutionProvider']\n" + ORT_ARENA
    v = verdict(tmp_path, log)
    assert v.cls == "host_oom", v.to_json()


@pytest.mark.parametrize("line", [
    "onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : CUDA "
    "failure 2: out of memory ; GPU=0 ; hostname=gpu-17 ; file=/onnxruntime_src/onnxruntime/core/"
    "providers/cuda/cuda_allocator.cc ; line=47 ; expr=cudaMalloc((void**)&p, size);",
    "[TRT] [E] 1: [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)",
    "[TRT] [W] Requested amount of GPU memory (4294967296 bytes) could not be allocated. There may "
    "not be enough free memory for allocation to succeed.",
    "pycuda._driver.MemoryError: cuMemAlloc failed: out of memory",
    "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in "
    "CUDA_ERROR_OUT_OF_MEMORY",
])
def test_non_torch_gpu_allocators_are_cuda_oom(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, TB + line + "\n")
    assert v.cls == "cuda_oom", v.to_json()


# ---- /dev/shm: torch's and NCCL's shared-memory segments ----

@pytest.mark.parametrize("line", [
    "RuntimeError: unable to write to file </torch_4120_2837461_3>: No space left on device (28)",
    "RuntimeError: unable to allocate shared memory(shm) for file </torch_77_91283_12>: "
    "No space left on device (28)",
    "RuntimeError: unable to open shared memory object </torch_812_338_0> in read-write mode: "
    "Too many open files (24)",
])
def test_torch_shared_memory_segment_full_is_dataloader_worker(tmp_path: Path, line: str) -> None:
    log = (TB + "RuntimeError: Caught RuntimeError in DataLoader worker process 1.\n"
           "Original Traceback (most recent call last):\n" + line + "\n")
    v = verdict(tmp_path, log)
    assert v.cls == "dataloader_worker", v.to_json()


@pytest.mark.parametrize("line", [
    "n7:3321:3390 [2] NCCL WARN Error: failed to extend /dev/shm/nccl-x9QpL2 to 9637892 bytes, "
    "error: No space left on device (28)",
    "n7:3321:3390 [2] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x9QpL2 "
    "(size 9637888), error: No space left on device (28)",
    "n7:3321:3390 [2] NCCL WARN Call to posix_fallocate failed : No space left on device",
])
def test_nccl_shared_memory_transport_full_is_nccl_error(tmp_path: Path, line: str) -> None:
    log = ("step 10 loss 2.1\n" + line + "\n" + TB +
           "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
           "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n")
    v = verdict(tmp_path, log)
    assert v.cls == "nccl_error", v.to_json()


def test_the_jobs_own_disk_full_stays_disk_full(tmp_path: Path) -> None:
    log = TB + "OSError: [Errno 28] No space left on device: '/scratch/u/ckpt/step_900.pt'\n"
    v = verdict(tmp_path, log)
    assert v.cls == "disk_full", v.to_json()


# ---- a library without (or unable to load) its GPU backend ----

@pytest.mark.parametrize("line", [
    "lightgbm.basic.LightGBMError: GPU Tree Learner was not enabled in this build.",
    "[LightGBM] [Fatal] CUDA Tree Learner was not enabled in this build.",
    "lightgbm.basic.LightGBMError: No OpenCL device found",
    "numba.cuda.cudadrv.error.CudaSupportError: CUDA is disabled due to setting "
    "NUMBA_DISABLE_CUDA=1 in the environment, or because CUDA is unsupported on 32-bit systems.",
    "numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: ",
    "CUDA driver library cannot be found.",
    "xgboost.core.XGBoostError: [10:01:02] /workspace/src/common/common.h:199: XGBoost version "
    "not compiled with GPU support.",
])
def test_gpu_backend_not_built_or_not_loadable_is_cuda_setup(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "fitting on device=cuda\n" + TB + line + "\n")
    assert v.cls == "cuda_setup", v.to_json()


def test_a_handled_backend_fallback_stays_success(tmp_path: Path) -> None:
    v = verdict(tmp_path, "numba: CudaSupportError caught, running the CPU kernels\n"
                "[train] done, auc 0.91\n", exit_code=0)
    assert v.cls == "success", v.to_json()


# ---- driver-API error wrappers ----

@pytest.mark.parametrize("line", [
    "numba.cuda.cudadrv.driver.CudaAPIError: [999] Call to cuMemcpyHtoD results in "
    "UNKNOWN_CUDA_ERROR",
    "numba.cuda.cudadrv.driver.CudaAPIError: [1] Call to cuLaunchKernel results in "
    "CUDA_ERROR_INVALID_VALUE",
    "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_INVALID_HANDLE: invalid resource "
    "handle",
    "pycuda._driver.LogicError: cuLaunchKernel failed: invalid resource handle",
])
def test_driver_api_error_wrappers_are_cuda_error(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, TB + line + "\n")
    assert v.cls == "cuda_error", v.to_json()


# ---- kernel Xids: GSP, initialization, recovery action ----

@pytest.mark.parametrize("kernel", [
    "[1200.1] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to "
    "0x2 (Node Reboot Required)\n",
    "[1200.1] NVRM: Xid (PCI:0000:3b:00): 143, GPU Initialization Failure\n",
    "[1200.1] NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 1 heartbeat 2\n",
    "[1200.1] NVRM: Xid (PCI:0000:3b:00): 119, pid=2231, name=python, Timeout after 6s of waiting "
    "for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).\n",
])
def test_gsp_and_recovery_xids_are_gpu_hardware(tmp_path: Path, kernel: str) -> None:
    log = (TB + "RuntimeError: CUDA error: unknown error\nCUDA kernel errors might be "
           "asynchronously reported at some other API call\n")
    v = verdict(tmp_path, log, kernel=kernel)
    assert v.cls == "gpu_hardware", v.to_json()


def test_recovery_action_cleared_is_not_hardware(tmp_path: Path) -> None:
    kernel = ("[1200.1] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 "
              "(GPU Reset Required) to 0x0 (None)\n")
    log = TB + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    v = verdict(tmp_path, log, kernel=kernel)
    assert v.cls == "cuda_error", v.to_json()


# ---- short reads of serialized arrays and models ----

@pytest.mark.parametrize("line", [
    "ValueError: EOF: reading array header, expected 118 bytes got 40",
    "ValueError: EOF: reading magic string, expected 6 bytes got 0",
    "ValueError: EOF: reading array data, expected 400000 bytes got 131072",
    "[LightGBM] [Fatal] Model format error, expect a tree here. met feature_importances:",
    "lightgbm.basic.LightGBMError: Model file doesn't specify max_feature_idx",
])
def test_short_reads_of_arrays_and_models_are_checkpoint_corrupt(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "loading model from /data/m/ensemble.bin\n" + TB + line + "\n")
    assert v.cls == "checkpoint_corrupt", v.to_json()
