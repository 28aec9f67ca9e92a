"""The family of classify/rules/35-memory.yaml: GPU memory exhausted (CUDA, XLA, ONNX Runtime,
TensorRT, pycuda, RMM, CuPy, MXNet, Paddle allocators, libraries that turn a CUDA OOM into their
own message) and host memory (Arrow, jemalloc, a plain MemoryError, the kernel's OOM killer in a
task's log); XLA's allocation failure, which is host memory unless a log of the job names a GPU
device (`if_seen`); and the benign mentions of these words that must stay what they were. Pure
logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    LOSSES,
    MAIN_TB,
    PROGRESS,
    SOLVER_PROGRESS,
    TRAINING,
    USER,
    job_verdict,
    log_alone,
    task,
    tb_by_line,
    verdict,
    write,
)

from gpualert_slurm.classify import (
    JobFacts,
    RuleError,
    TaskInput,
    classify,
    load_rules,
)

XLA_OOM = ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating "
           "8589934592 bytes.\n")


def _paddle_oom(gpu: int) -> str:
    # paddle/fluid/memory/allocation/cuda_allocator.cc's summary, raised as a MemoryError whose
    # C++ traceback separates it from the summary
    return ("Traceback (most recent call last):\n  File \"tools/train.py\", line 31, in <module>\n"
            "    main()\n  File \"ppdet/engine/trainer.py\", line 588, in train\n"
            "    outputs = model(data)\nMemoryError: \n\n" + "-" * 38
            + "\nC++ Traceback (most recent call last):\n" + "-" * 38
            + "\n0   paddle::memory::allocation::Allocator::Allocate(unsigned long)\n"
            "1   paddle::memory::allocation::CUDAAllocator::AllocateImpl(unsigned long)\n\n"
            + "-" * 22 + "\nError Message Summary:\n" + "-" * 22
            + f"\nResourceExhaustedError: \n\nOut of memory error on GPU {gpu}. Cannot allocate "
            f"1.2GB memory on GPU {gpu}, 22.1GB memory has been allocated and available memory "
            f"is only 600MB.\n\nPlease check whether there is any other process using GPU {gpu}.\n"
            " (at /paddle/paddle/fluid/memory/allocation/cuda_allocator.cc:95)\n")


ORT_ARENA = ("2026-04-01 10:00:00.1 [E:onnxruntime:, sequential_executor.cc:516 ExecuteKernel] "
             "Non-zero status code returned while running Conv node. Name:'/stem/conv' Status "
             "Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* "
             "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
             "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of "
             "size 805306368\n")


# ---- if_seen: XLA's "Out of memory allocating" ----

def test_xla_alloc_oom_without_gpu_is_host_memory(tmp_path: Path) -> None:
    log = ("I0101 pjrt_client.cc:583] Addressable PjRt-IFRT device: CpuDevice(id=0)\n"
           "step 10 loss 0.3\nTraceback (most recent call last):\n"
           '  File "train.py", line 9, in <module>\n' + XLA_OOM)
    assert job_verdict([task(tmp_path, log)]).cls == "host_oom"


def test_xla_alloc_oom_with_a_gpu_device_in_the_log_is_gpu_memory(tmp_path: Path) -> None:
    log = ("I0101 pjrt_client.cc:583] Addressable PjRt-IFRT device: CudaDevice(id=0)\n"
           "step 10 loss 0.3\n" + XLA_OOM)
    v = job_verdict([task(tmp_path, log)])
    assert v.cls == "cuda_oom"
    assert "Out of memory allocating" in v.evidence[0].text


def test_if_seen_looks_at_every_task_log_of_the_job(tmp_path: Path) -> None:
    r0 = task(tmp_path, "2026 gpu_device.cc:2019] Created device /job:localhost/replica:0/"
              "task:0/device:GPU:0 with 78000 MB memory\nstep 1 ok\n", "run.0.log", 0,
              exit_code=0)
    r1 = task(tmp_path, "step 1 ok\n" + XLA_OOM, "run.1.log", 1)
    v = job_verdict([r0, r1], exit_code=1)
    assert (v.cls, v.root_rank) == ("cuda_oom", 1)


def test_gpu_device_marker_never_decides_nor_hides_its_line(tmp_path: Path) -> None:
    # the marker has the lowest priority: TF's OOM line naming device:GPU:0 stays cuda_oom
    log = ("ResourceExhaustedError: OOM when allocating tensor with shape[64,1024] and type "
           "float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")
    assert job_verdict([task(tmp_path, log)]).cls == "cuda_oom"
    ok = task(tmp_path, "Created device /job:localhost/replica:0/task:0/device:GPU:0\n"
              "epoch 1 done\n", "run.1.log", exit_code=0)
    assert job_verdict([ok]).cls == "success"


@pytest.mark.parametrize("field,msg", [
    ("{rule: no_such_rule, class: cuda_oom}", "is not a rule id"),
    ("{rule: gpu_device_seen, class: no_such_class}", "is not a known class id"),
    ("gpu_device_seen", "must be {rule: <rule id>, class: <class id>}"),
])
def test_if_seen_is_validated(tmp_path: Path, field: str, msg: str) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("rules:\n  - id: my_oom\n    class: host_oom\n    patterns: ['my allocator "
                    f"failed']\n    if_seen: {field}\n")
    with pytest.raises(RuleError, match=r"my_oom.*if_seen") as e:
        load_rules(extra_files=[site], use_cache=False, site=False)
    assert msg in str(e.value)


@pytest.mark.parametrize("text", [
    _paddle_oom(3),
    # RAPIDS: rmm::out_of_memory from a pool resource, surfaced by cudf
    "Traceback (most recent call last):\n  File \"etl.py\", line 8, in <module>\n"
    "    df = cudf.read_parquet(p)\nMemoryError: std::bad_alloc: out_of_memory: RMM failure at:"
    "/opt/conda/include/rmm/mr/device/arena_memory_resource.hpp:181: Maximum pool size exceeded\n",
    "MemoryError: std::bad_alloc: out_of_memory: CUDA error at: /opt/rmm/include/rmm/mr/device/"
    "cuda_memory_resource.hpp:60: cudaErrorMemoryAllocation out of memory\n",
    # MXNet's pooled storage retrying cudaMalloc
    "mxnet.base.MXNetError: [08:12:44] src/storage/./pooled_storage_manager.h:157: cudaMalloc "
    "retry failed: out of memory\n",
    "CuPy pool: cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 8,589,934,592 bytes "
    "(allocated so far: 70,866,960,384 bytes).\n",
])
def test_framework_gpu_allocator_oom_is_gpu_memory(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, SOLVER_PROGRESS + text)
    assert v.cls == "cuda_oom", (v.cls, v.evidence)


def test_a_plain_memory_error_on_a_gpu_job_stays_host_memory(tmp_path: Path) -> None:
    text = ("torch 2.5.1+cu124, CUDA available: True\nusing device cuda:0\n"
            "Traceback (most recent call last):\n  File \"prep.py\", line 12, in <module>\n"
            "    table = np.empty((n, n))\nMemoryError: Unable to allocate 3.64 TiB for an array "
            "with shape (1000000, 500000) and data type float64\n")
    assert verdict(tmp_path, text).cls == "host_oom"


def test_tf_resource_exhausted_for_memory_stays_cuda_oom(tmp_path: Path) -> None:
    exc = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
           "tensor with shape[64,1024,1024] and type float on /job:localhost/replica:0/task:0/"
           "device:GPU:0 by allocator GPU_0_bfc\n")
    assert verdict(tmp_path, exc).cls == "cuda_oom"


# ---- cuda_oom: libraries that turn a CUDA OOM into their own message ----

@pytest.mark.parametrize("exc", [
    "RuntimeError: No executable batch size found, reached zero.",
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine.",
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 "
    "GiB KV cache is needed, which is larger than the available KV cache memory (9.21 GiB). "
    "Based on the available memory, the estimated maximum model length is 75424. Try "
    "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
    "engine.",
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (20112). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.",
    "ValueError: Free memory on device (30.1/79.1 GiB) on startup is less than desired GPU "
    "memory utilization (0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory "
    "used by other processes.",
])
def test_library_oom_messages(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb_by_line(USER, exc=exc))
    assert v.cls == "cuda_oom", v.to_json()


def test_batch_size_finder_backing_off_then_success(tmp_path: Path) -> None:
    text = ("Batch size 256 failed, trying batch size 128\nBatch size 128 succeeded, trying "
            "batch size 192\nFinished batch size finder, will continue with full run using "
            "batch size 128\n" + PROGRESS + "done\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


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
    v = verdict(tmp_path, "reading shard 3 of 12\n" + MAIN_TB + line + "\n")
    assert v.cls == "host_oom", v.to_json()


def test_a_traceback_cut_inside_arrows_allocator_is_host_oom(tmp_path: Path) -> None:
    log = (MAIN_TB + '  File "pyarrow/io.pxi", line 1702, in pyarrow.lib.allocate_buffer\n'
           '  File "pyarrow/error.pxi", line 92, in pyarrow.lib.check_status\n')
    v = verdict(tmp_path, log)
    assert v.cls == "host_oom", v.to_json()


def test_allocator_words_in_a_benign_line_stay_success(tmp_path: Path) -> None:
    v = verdict(tmp_path, "arrow memory pool: jemalloc (malloc of size classes tuned)\ndone\n",
                exit_code=0)
    assert v.cls == "success", v.to_json()


# ---- GPU memory: non-torch allocators ----

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
    v = verdict(tmp_path, MAIN_TB + line + "\n")
    assert v.cls == "cuda_oom", v.to_json()


# ---- evidence wherever it appears, killed vs host_oom -----------------------------------------

def test_kernel_oom_line_inside_a_task_log_decides_host_oom(tmp_path):
    path = write(tmp_path, "0.0.log", LOSSES + "[ 8812.4] Out of memory: Killed process 4096 "
                 "(python) total-vm:9123456kB, anon-rss:8812345kB\nKilled\n")
    v = classify([TaskInput(path)], JobFacts(exit_code=137))
    assert v.cls == "host_oom"
    assert "Out of memory: Killed process" in v.evidence[0].text


# ---- host memory seen from inside the program ----

@pytest.mark.parametrize("exc", [  # held before
    "MemoryError", "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 12.0 GiB for "
    "an array with shape (40000, 40000) and data type float64",
    "OSError: [Errno 12] Cannot allocate memory"])
def test_host_memory_from_inside(tmp_path: Path, exc: str) -> None:
    text = (TRAINING + "Traceback (most recent call last):\n  File \"train.py\", line 7, in "
            "<module>\n    x = build()\n" + exc + "\n")
    assert log_alone(tmp_path, text) == "host_oom"


def test_memory_error_then_a_half_written_file_is_host_memory(tmp_path: Path) -> None:
    # (was: disk_full) torch.save ran out of host memory; closing the zip then failed
    ser = "/opt/conda/lib/python3.10/site-packages/torch/serialization.py"
    text = (TRAINING + f"Traceback (most recent call last):\n  File \"{ser}\", line 441, in "
            f"save\n    _save(obj, opened_zipfile, pickle_module, pickle_protocol)\n  File "
            f"\"{ser}\", line 668, in _save\n    zip_file.write_record(name, storage, num_bytes)"
            f"\nMemoryError\n\nDuring handling of the above exception, another exception "
            f"occurred:\n\nTraceback (most recent call last):\n  File \"{ser}\", line 440, in "
            f"save\n    with _open_zipfile_writer(f) as opened_zipfile:\n  File \"{ser}\", line "
            "291, in __exit__\n    self.file_like.write_end_of_file()\nRuntimeError: [enforce "
            "fail at inline_container.cc:337] . unexpected pos 4412736 vs 4412630\n")
    assert log_alone(tmp_path, text) == "host_oom"
