"""The family of classify/rules/90-realworld-wordings.yaml: wordings real logs carry that no rule
above knew, and the false alarms around them. GPU hardware named by the driver, the firmware,
NVML (pynvml's NVMLError_<Name> classes) or nvidia-smi; NCCL's return traces, allocation
failures and collective timeouts without the watchdog line; XLA's peak-buffer listing; progress
tables and loggers whose loss turns NaN; DeepSpeed's loss scaler at its floor; IPython's
traceback header; conda's activate noise; shared-filesystem errnos and full disks in other
words. Lines are written from their sources' formats (NVIDIA's Xid catalogue, NCCL's checks.h /
alloc.h / proxy.cc, torch's THC and ProcessGroupNCCL messages); the NaN loggers and the wrapped
storage errors are also really run (corpus/gen/progs/f10_msgs.py, torch CPU)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from classifylib import MSGS_PROG, STEPS, TORCH_PY, verdict

TORCH_CUDA = ('Traceback (most recent call last):\n  File "/u/p/train.py", line 8, in <module>\n'
              '    log_gpu_stats()\n  File "/env/site-packages/torch/cuda/__init__.py", '
              'line 1090, in utilization\n    handle = _get_pynvml_handler(device)\n'
              '  File "/env/site-packages/pynvml.py", line 2010, in _nvmlCheckReturn\n'
              '    raise NVMLError(ret)\n')


def _run(tmp_path: Path, *args: str) -> tuple[str, int]:
    log = tmp_path / "out.log"
    with open(log, "wb") as out:
        p = subprocess.run([TORCH_PY, str(MSGS_PROG), *args], stdout=out, stderr=subprocess.STDOUT,
                           timeout=120, cwd=tmp_path)
    return log.read_text(), p.returncode


# ---- GPU hardware named by the driver, the firmware or nvidia-smi ----

@pytest.mark.parametrize("hw", [48, 74, 79, 94, 95, 119, 140, 145, 149])
def test_an_xid_caused_by_a_hardware_xid_is_gpu_hardware(tmp_path: Path, hw: int) -> None:
    v = verdict(tmp_path, STEPS + f"[ 812.44] NVRM: Xid (PCI:0000:3b:00): 45, pid=40411, "
                f"name=python, Ch 00000007 caused by previous Xid {hw}\n", exit_code=None)
    assert v.cls == "gpu_hardware", v.detail


def test_an_xid_caused_by_an_application_xid_stays_cuda_error(tmp_path: Path) -> None:
    v = verdict(tmp_path, STEPS + "[ 812.44] NVRM: Xid (PCI:0000:3b:00): 45, pid=40411, "
                "name=python, Ch 00000007 caused by previous Xid 13\n", exit_code=None)
    assert v.cls == "cuda_error"


@pytest.mark.parametrize("line", [
    "[ 31.2] NVRM: GPU3 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 5512 "
    "heartbeat 4410 heartbeatWithOffsetMs 5500 diff 6100 timeout 5200",
    "[ 91.0] NVRM: GPU1 _kgspLogRpcTimeout: ********** GSP Timeout **********",
    "[ 91.0] NVRM: GPU1 kgmmuCheckMemSubsysError_IMPL: Memory Subsystem Error detected. x failed.",
    "Unable to determine the device handle for GPU0000:5E:00.0: Unknown Error",
])
def test_gsp_and_lost_handle_wordings_are_gpu_hardware(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, STEPS + line + "\n", exit_code=None).cls == "gpu_hardware"


# ---- the GPU stack that cannot start ----

@pytest.mark.parametrize(("exc", "cls"), [
    ("pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded", "cuda_setup"),
    ("pynvml.nvml.NVMLError_Unknown: Unknown Error", "cuda_setup"),
    ("pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.",
     "cuda_setup"),
    ("pynvml.NVMLError_GpuIsLost: GPU is lost", "gpu_hardware"),
])
def test_nvml_errors_through_pynvml(tmp_path: Path, exc: str, cls: str) -> None:
    assert verdict(tmp_path, TORCH_CUDA + exc + "\n").cls == cls


def test_thc_error_46_is_cuda_setup(tmp_path: Path) -> None:
    text = ("THCudaCheck FAIL file=/src/torch/lib/THC/THCGeneral.c line=70 error=46 : all "
            "CUDA-capable devices are busy or unavailable\nTraceback (most recent call last):\n"
            '  File "t.py", line 3, in <module>\n    x = x.cuda()\n'
            "RuntimeError: cuda runtime error (46) : all CUDA-capable devi\n")
    assert verdict(tmp_path, text, exit_code=None).cls == "cuda_setup"


# ---- NCCL's own lines ----

def test_nccl_return_trace_alone_is_nccl_error(tmp_path: Path) -> None:
    text = "".join(f"n7:311:320 [1] NCCL INFO Channel {c:02d}/0 : 1[0] -> 0[0] via NET/IB/0\n"
                   for c in range(4))
    text += ("n7:311:322 [1] NCCL INFO transport/net.cc:870 -> 6\n"
             "n7:311:322 [1] NCCL INFO init.cc:2011 -> 6\n")
    v = verdict(tmp_path, text, exit_code=None)
    assert v.cls == "nccl_error" and v.confidence <= 0.5


def test_nccl_cuda_alloc_failure_beats_the_proxy_socket_it_broke(tmp_path: Path) -> None:
    text = ("n3:90:95 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for "
            "opId=0x7f00\n"
            "n3:90:95 [0] NCCL INFO transport/p2p.cc:438 -> 3\n" * 5
            + "\nn3:93:99 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
            "n3:93:99 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 4194304 bytes\n")
    assert verdict(tmp_path, text, exit_code=None).cls == "cuda_oom"


@pytest.mark.parametrize("line", [
    "[rank2]:[E ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 2] Timeout at "
    "NCCL work: 8812, last enqueued NCCL work: 8812, last completed NCCL work: 8811.",
    "RuntimeError: connect() timed out. Original timeout was 900000 ms.",
    "[rank3]:[E1201 10:11:12.1 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
    "Received a dump signal due to a collective timeout from rank 5 and we will try our best to "
    "dump the debug info. Last enqueued NCCL work: 90, last completed NCCL work: 90.",
])
def test_collective_timeouts_without_the_watchdog_line(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, STEPS + line + "\n", exit_code=None).cls == "collective_timeout"


def test_xla_peak_buffer_listing_is_device_memory(tmp_path: Path) -> None:
    text = ("\tPeak buffers:\n\t\tBuffer 1:\n\t\t\tSize: 4.00GiB\n\t\t\tXLA Label: fusion\n"
            "\t\t\tShape: f32[64,4096,4096]\n\nTraceback (most recent call last):\n"
            '  File "/w/main.py", line 9, in <module>\n    app.run(main)\n')
    assert verdict(tmp_path, text, exit_code=None).cls == "cuda_oom"


# ---- divergence in a logger's own lines, and the false alarms around it ----

def test_a_progress_table_turning_nan_is_divergence(tmp_path: Path) -> None:
    rows = "".join(f"| {s:5d} | {1.0 / s:10.4f} | {2.0 / s:8.4f} |\n" for s in range(10, 60, 10))
    rows += "".join(f"| {s:5d} | {'nan':>10} | {'inf':>8} |\n" for s in range(60, 90, 10))
    for code in (1, None):
        assert verdict(tmp_path, "| step | loss | grad |\n" + rows, exit_code=code).cls \
            == "nan_divergence"


def test_a_results_table_with_a_missing_value_after_exit_0_is_success(tmp_path: Path) -> None:
    """pandas' to_markdown of an evaluation's results: a nan cell is a missing value, and a
    table row alone is not silent evidence."""
    text = STEPS + "|    |   f1 |   auc |\n|---:|-----:|------:|\n|  0 | 0.81 |  0.90 |\n" \
        "|  1 | 0.77 |   nan |\n"
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


@pytest.mark.parametrize("line", [
    "step 40 | Grad=inf | lr 1e-4", "epoch 3 | gnorm inf | loss 2.1", "iter 100 grad-norm: inf",
    "it 500 loss=-nan acc=0.1", "loss: -nan(ind)", "step 7 total_norm=nan",
])
def test_a_loggers_own_non_finite_spellings_are_divergence(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, STEPS + line + "\n", exit_code=None).cls == "nan_divergence"


def test_clip_options_set_to_inf_are_no_divergence(tmp_path: Path) -> None:
    text = "config: max_grad_norm=inf clip_grad=inf grad_clip: inf\n" + STEPS + "done\n"
    assert verdict(tmp_path, text, exit_code=0).cls == "success"
    assert verdict(tmp_path, text + "KeyError: 'lr'\n").cls == "python_exception"


def test_a_table_row_nan_that_turned_finite_is_no_divergence(tmp_path: Path) -> None:
    text = "| 10 | 0.52 | 1.3 |\n| 20 | nan | nan |\n| 30 | 0.41 | 1.1 |\n| 40 | 0.39 | 1.0 |\n"
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


def test_a_nan_metric_that_turns_finite_is_recovered(tmp_path: Path) -> None:
    text = ("iter 100: loss: 1.91, grad_norm: nan\niter 200: loss: 0.91, grad_norm: 3.97\n"
            "iter 300: loss: 0.71, grad_norm: 2.02\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"
    # ... and is not the root of a failure that came later
    v = verdict(tmp_path, text + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                "2.00 GiB\n")
    assert v.cls == "cuda_oom"


@pytest.mark.parametrize("line", [
    "step=400 loss=0.0213 nan_steps=0 inf_grads=0",
    "summary: non-finite steps: 0, NaN losses: 0, Inf gradients: 0",
    "sanity check passed: no NaN found in 1200 batches",
    "eval: found 0 NaN values in the predictions",
    "zero NaN gradients after clipping",
])
def test_zero_counts_of_non_finite_steps_are_success(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, STEPS + line + "\ndone\n", exit_code=0).cls == "success"


def test_deepspeed_loss_scale_near_its_floor(tmp_path: Path) -> None:
    text = "".join(f"[INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                   f"Skipping step. Attempted loss scale: {2 ** k}, reducing to {2 ** (k - 1)}\n"
                   for k in range(6, 1, -1))
    assert verdict(tmp_path, text, exit_code=None).cls == "nan_divergence"
    # the first halvings of a healthy fp16 run are no divergence
    early = ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing "
             "to 32768\n" + STEPS)
    assert verdict(tmp_path, early, exit_code=None).cls == "unknown"


# ---- an exception line that names its class ----

def test_ipython_header_names_the_exception(tmp_path: Path) -> None:
    text = ("-" * 60 + "\nKeyError                                  Traceback (most recent call "
            "last)\nCell In[4], line 2\n----> 2 run(cfg)\n\nFile /u/lib/run.py:31, in run(cfg)\n")
    v = verdict(tmp_path, text, exit_code=None)
    assert v.cls == "python_exception" and "KeyError" in v.detail


def test_conda_activate_noise_yields_to_the_later_error(tmp_path: Path) -> None:
    text = ("CommandNotFoundError: Your shell has not been properly configured to use 'conda "
            "activate'.\nTo initialize your shell, run\n\n    $ conda init <SHELL_NAME>\n\n"
            + STEPS + "Traceback (most recent call last):\n"
            '  File "/u/p/train.py", line 12, in <module>\n    open(cfg)\n'
            "FileNotFoundError: [Errno 2] No such file or directory: 'conf/a.yaml'\n")
    assert verdict(tmp_path, text).cls == "file_not_found"


def test_sklearn_metric_on_nan_predictions_is_divergence(tmp_path: Path) -> None:
    tb = ('Traceback (most recent call last):\n  File "/u/cv.py", line 80, in evaluate\n'
          '    r2 = r2_score(y, pred)\n')
    metric = ('  File "/env/site-packages/sklearn/metrics/_regression.py", line 989, in r2_score\n'
              '    y_type, y_true, y_pred, multioutput = _check_reg_targets(\n')
    fit = ('  File "/env/site-packages/sklearn/linear_model/_base.py", line 609, in fit\n'
           '    X, y = self._validate_data(X, y)\n')
    exc = "ValueError: Input contains NaN, infinity or a value too large for dtype('float64').\n"
    assert verdict(tmp_path, tb + metric + exc).cls == "nan_divergence"
    assert verdict(tmp_path, tb + fit + exc).cls == "python_exception"  # the input data


def test_torch_writer_that_cannot_open_its_file(tmp_path: Path) -> None:
    text = ('Traceback (most recent call last):\n  File "/env/torch/serialization.py", line 422, '
            'in save\n    with _open_zipfile_writer(f) as opened_zipfile:\n'
            "RuntimeError: File /ckpt/run7/epoch_12.pt cannot be opened.\n")
    v = verdict(tmp_path, text)
    assert v.cls == "disk_full" and v.confidence <= 0.5 and "errno" in v.detail


@pytest.mark.parametrize("exc", [
    "OSError: [Errno 121] Remote I/O error: '/mnt/weka/ds/shard-3.tar'",
    "OSError: [Errno 112] Host is down: '/cifs/lab/feats.npy'",
    "OSError: [Errno 67] Link has been severed",
    # HDF5's sec2 driver refused its file lock on a network filesystem (H5FDsec2.c format)
    "OSError: Unable to open file (unable to lock file, errno = 11, error message = 'Resource "
    "temporarily unavailable')",
    # carried by a wrapper's message
    "RuntimeError: failed to load shard 12: [Errno 121] Remote I/O error",
])
def test_shared_filesystem_errnos_are_storage_io(tmp_path: Path, exc: str) -> None:
    tb = 'Traceback (most recent call last):\n  File "/u/data.py", line 40, in load\n    x = f()\n'
    assert verdict(tmp_path, tb + exc + "\n").cls == "storage_io"


def test_too_many_open_files_is_no_storage_failure(tmp_path: Path) -> None:
    tb = 'Traceback (most recent call last):\n  File "/u/data.py", line 40, in load\n    x = f()\n'
    assert verdict(tmp_path, tb + "OSError: [Errno 24] Too many open files\n").cls \
        == "python_exception"


@pytest.mark.parametrize("exc", [
    # TensorFlow maps ENOSPC to RESOURCE_EXHAUSTED: a disk, not GPU memory
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: /ckpt/run3/model.ckpt-800"
    "_temp/part-00000-of-00001.data-00000-of-00001.tempstate91; No space left on device",
    "OSError: Not enough disk space. Needed: 2.31 GiB (download: 1.10 GiB, generated: 1.21 GiB, "
    "post-processed: Unknown size)",
])
def test_a_full_disk_in_other_words(tmp_path: Path, exc: str) -> None:
    tb = 'Traceback (most recent call last):\n  File "/u/run.py", line 40, in main\n    go()\n'
    assert verdict(tmp_path, tb + exc + "\n").cls == "disk_full"


# ---- really run: wrappers, storage errors, loggers ----

@pytest.mark.parametrize(("args", "cls", "code"), [
    (("nanlog", "table", "1"), "nan_divergence", 1),
    (("nanlog", "caps", "0"), "nan_divergence", 0),
    (("nanlog", "kv", "1"), "nan_divergence", 1),
    (("fine", "zero"), "success", 0),
    (("fine", "transient"), "success", 0),
    (("worker", "estale", "data"), "storage_io", 1),
    (("reraise", "estale_msg", "data"), "storage_io", 1),
    (("worker", "errno_EREMOTEIO", "data"), "storage_io", 1),
])
def test_really_run(tmp_path: Path, args: tuple[str, ...], cls: str, code: int) -> None:
    text, rc = _run(tmp_path, *args)
    assert rc == code, text[-2000:]
    v = verdict(tmp_path, text, exit_code=rc)
    assert v.cls == cls, v.detail
