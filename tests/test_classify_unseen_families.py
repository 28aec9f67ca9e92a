"""Issue 32, section 1 and the container part of section 3: families of logs that real sets
nobody here had seen missed. Each family is a wording or a decision, not a file: the lines are
written from the tools' own formats (Slurm's slurmstepd, TensorFlow's and XLA's cuda_driver.cc,
Hugging Face Trainer's log dict, fairseq's loss scaler, NCCL's debug.h / socket.c, Open MPI's
help-errmgr-base.txt, NVML's error strings, dcgmi's health report, aws-sdk-cpp's curl client,
AzureML's error code, pyxis / enroot's messages), not copied from the real-world sets.

The comment above each group names what the verdict was before the fix; a group marked
"held before" pins a family that already worked, so that it stays so."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from classifylib import TORCH_PY, verdict

from gpualert_slurm.classify import JobFacts, TaskInput, classify
from gpualert_slurm.classify.node_trust import _kernel_classes

PROGRESS = "".join(f"epoch 0 | step {i * 50} | loss {2.5 - i * 0.1:.3f}\n" for i in range(6))


def alone(tmp_path: Path, text: str, **kw) -> str:
    """The class of a log given alone (no exit status), as a pasted log is scored."""
    return verdict(tmp_path, text, exit_code=None, **kw).cls


def timed(start_h: int, n: int) -> str:
    """A logger's timed lines, one a minute from start_h:00 on 2026-03-01."""
    return "".join(f"2026-03-01 {start_h + i // 60:02d}:{i % 60:02d}:07,123 INFO train: step "
                   f"{i * 20} loss {2.0 - i * 0.01:.3f}\n" for i in range(n))


# ---- Slurm's own end line outranks an inference (was: hang / unknown) ----

@pytest.mark.parametrize("state,exit_code,signal", [
    ("TIMEOUT", None, 15), (None, None, None)])
def test_time_limit_after_a_long_quiet_is_the_time_limit(tmp_path: Path, state, exit_code,
                                                         signal) -> None:
    # the log's own stamps: 30 minutes of steps, then nothing for 5 hours until Slurm's line
    text = (timed(2, 30) + "slurmstepd: error: *** JOB 9127 ON gpu-04 CANCELLED AT "
            "2026-03-01T07:31:00 DUE TO TIME LIMIT ***\n")
    (tmp_path / "run.0.log").write_text(text)
    v = classify([TaskInput(str(tmp_path / "run.0.log"), rank=0, exit_code=exit_code,
                            signal=signal)],
                 JobFacts(exit_code=exit_code, signal=signal, slurm_state=state))
    assert v.cls == "time_limit", v.detail


def test_time_limit_right_after_a_collective_set_up_is_the_time_limit(tmp_path: Path) -> None:
    text = (PROGRESS + "gpu-04:1234:1290 [0] NCCL INFO comm 0x55d0 rank 0 nranks 8 cudaDev 0 "
            "busId 1b000 - Init START\nslurmstepd: error: *** JOB 9127 ON gpu-04 CANCELLED AT "
            "2026-03-01T07:31:00 DUE TO TIME LIMIT ***\n")
    assert alone(tmp_path, text) == "time_limit"


@pytest.mark.parametrize("what", ["JOB 5120", "STEP 5120.0"])
def test_slurms_cancel_line_with_the_signal_is_cancelled(tmp_path: Path, what: str) -> None:
    # slurmstepd names the signal with strsignal(): "DUE to SIGNAL Terminated"
    text = PROGRESS + (f"slurmstepd: error: *** {what} ON cn12 CANCELLED AT 2026-05-02T11:22:33 "
                       "DUE to SIGNAL Terminated ***\n")
    assert alone(tmp_path, text) == "cancelled"


# ---- benign CUDA probes must not outrank the failure after them (was: cuda_setup) ----

CUINIT = ("2026-03-04 05:06:07.123456: E tensorflow/compiler/xla/stream_executor/cuda/"
          "cuda_driver.cc:268] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable "
          "device is detected\n")
DSO = ("2026-03-04 05:06:06.000001: W tensorflow/stream_executor/platform/default/"
       "dso_loader.cc:64] Could not load dynamic library 'libcudart.so.11.0'; dlerror: "
       "libcudart.so.11.0: cannot open shared object file: No such file or directory\n")


@pytest.mark.parametrize("after,cls", [
    ("Traceback (most recent call last):\n  File \"prep.py\", line 40, in <module>\n"
     "    x = np.zeros((n, d))\nnumpy.core._exceptions._ArrayMemoryError: Unable to allocate "
     "381. GiB for an array with shape (200000, 256000) and data type float64\n", "host_oom"),
    ("Traceback (most recent call last):\n  File \"prep.py\", line 3, in <module>\n"
     "    import sklearn\nModuleNotFoundError: No module named 'sklearn'\n", "import_error"),
    ("Traceback (most recent call last):\n  File \"prep.py\", line 9, in <module>\n"
     "    buf = [0.0] * n\nMemoryError\n", "host_oom"),
])
def test_cuda_probe_noise_yields_to_the_real_failure(tmp_path: Path, after: str, cls: str
                                                     ) -> None:
    assert alone(tmp_path, DSO + CUINIT + PROGRESS + after) == cls
    assert verdict(tmp_path, CUINIT + PROGRESS + after).cls == cls


def test_cuda_probe_alone_still_explains_a_failed_job(tmp_path: Path) -> None:
    v = verdict(tmp_path, PROGRESS + CUINIT)
    assert v.cls == "cuda_setup" and v.confidence < 0.7


# ---- divergence shown only in a trainer's summary (was: success / unknown) ----

def test_eval_loss_nan_at_every_evaluation_is_divergence_even_on_exit_0(tmp_path: Path) -> None:
    text = ""
    for e in range(1, 4):
        text += (f"{{'loss': {0.0 if e > 1 else 1.93}, 'grad_norm': 0.0, 'learning_rate': "
                 f"{5e-5 - e * 1e-5:.1e}, 'epoch': {e - 0.5}}}\n"
                 f"{{'eval_loss': nan, 'eval_runtime': 12.31, 'eval_samples_per_second': 81.2, "
                 f"'eval_steps_per_second': 10.2, 'epoch': {float(e)}}}\n")
    text += ("{'train_runtime': 912.4, 'train_samples_per_second': 32.9, "
             "'train_steps_per_second': 4.1, 'train_loss': nan, 'epoch': 3.0}\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "nan_divergence"
    assert alone(tmp_path, text) == "nan_divergence"


def test_lightning_progress_postfix_nan_is_divergence(tmp_path: Path) -> None:
    text = ("Epoch 3:  41%|####1     | 412/1000 [01:12<01:43, 5.68it/s, v_num=7, "
            "train_loss_step=nan.0]\n")
    assert alone(tmp_path, PROGRESS + text) == "nan_divergence"


def test_fairseq_loss_scale_collapsing_is_divergence(tmp_path: Path) -> None:
    scale = 2.0
    text = ""
    while scale > 1e-4:
        scale /= 2
        text += f"| WARNING: overflow detected, setting loss scale to: {scale}\n"
    assert alone(tmp_path, PROGRESS + text + "Traceback (most recent call last):\n") \
        == "nan_divergence"
    # a scale that dips and recovers is not divergence
    assert alone(tmp_path, PROGRESS + "| WARNING: overflow detected, setting loss scale to: "
                 "64.0\n" + PROGRESS) != "nan_divergence"


# ---- multi-node launchers' prefixes; NCCL errors inside a traceback ----

NCCL_TB = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
           "    dist.all_reduce(t)\ntorch.distributed.DistBackendError: NCCL error in: "
           "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
           "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\nncclSystemError: System "
           "call (e.g. socket, malloc) or external library call failed or device error.\n")


@pytest.mark.parametrize("prefix", ["worker-3: ", "10.2.0.17: ", "[1,5]<stderr>:"])
def test_launcher_prefixed_nccl_error_in_a_traceback(tmp_path: Path, prefix: str) -> None:
    # held before: pdsh's "host: ", DeepSpeed's runner (pdsh under it), mpirun --tag-output
    text = "".join(prefix + ln + "\n" for ln in (PROGRESS + NCCL_TB).splitlines())
    assert alone(tmp_path, text) == "nccl_error"


def test_nccl_before_2_4_warn_lines_without_the_nccl_word(tmp_path: Path) -> None:
    # (was: unknown) debug.h's "host:pid:tid [dev] file:line WARN msg" and "INFO file:line -> N"
    text = PROGRESS + "".join(
        f"gpu-n{n}:2201:2290 [{d}] include/socket.h:197 WARN Call to recv failed : Connection "
        f"reset by peer\ngpu-n{n}:2201:2290 [{d}] INFO bootstrap.cu:172 -> 2\n"
        for n, d in ((2, 0), (2, 1)))
    assert alone(tmp_path, text) == "nccl_error"


def test_nccl_bootstrap_connect_retries_at_the_end(tmp_path: Path) -> None:
    # (was: unknown) src/misc/socket.cc "Call to connect returned %s, retrying"
    text = PROGRESS + "".join("gpu-n2:2201:2290 [0] NCCL INFO Call to connect returned Connection "
                              "refused, retrying\n" for _ in range(6))
    assert alone(tmp_path, text) == "nccl_error"


def test_open_mpi_1_lost_daemon_wording_is_node_failure(tmp_path: Path) -> None:
    # (was: unknown) Open MPI 1.x help-errmgr-base.txt
    text = (PROGRESS + "------------------------------------------------------------------\n"
            "ORTE has lost communication with its daemon located on node:\n\n"
            "  hostname:  compute-0-7\n\nThis is usually due to either a failure of the TCP "
            "network\nconnection to the node, or possibly an internal failure of\nthe daemon "
            "itself. We cannot recover from this failure, and\ntherefore will terminate the "
            "job.\n")
    assert alone(tmp_path, text) == "node_failure"


# ---- GPU hardware in the job's own output (was: unknown / cuda_error) ----

@pytest.mark.parametrize("text", [
    "+ dmesg | tail -2\n[ 8123.441902] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! "
    "(0x25:0x65:1457)\n[ 8123.442010] NVRM: GPU 0000:41:00.0: rm_init_adapter failed, device "
    "minor number 2\n",
    "+ nvidia-smi\nGPU 00000000:41:00.0: GPU requires reset\n",
    "+ dcgmi health -c -g 0\n| Health Monitor Report                              |\n"
    "| Overall Health            | Failure                |\n"
    "| -> 2                      | Failure                |\n"
    "|    -> Memory              | Failure                |\n"
    "|                           | Detected 3 volatile double-bit ECC error(s) in GPU 2. |\n",
    "+ nvidia-smi -q -d ROW_REMAPPER\n    Remapped Rows\n        Correctable Error           : 0\n"
    "        Uncorrectable Error         : 3\n        Pending                     : Yes\n"
    "        Remapping Failure Occurred  : Yes\n",
])
def test_gpu_hardware_wordings_in_job_output(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, PROGRESS + text)
    assert v.cls == "gpu_hardware", v.detail


@pytest.mark.parametrize("line", [
    "GPU 00000000:41:00.0: GPU requires reset",
    "| Overall Health            | Failure                |",
    "Detected 3 volatile double-bit ECC error(s) in GPU 2.",
    "        Remapping Failure Occurred  : Yes",
])
def test_job_output_hardware_wordings_back_no_drain(line: str) -> None:
    # the trust boundary stands: only the kernel rules judge root's sealed driver lines, and
    # these job-output wordings are not among them
    assert "gpu_hardware" not in _kernel_classes(line)


# ---- storage errors that reach Python as OSError, in wrappers (held before, but AWS curl) ----

@pytest.mark.parametrize("exc", [
    "RuntimeError: failed to read shard 17: [Errno 5] Input/output error: '/lustre/ds/17.bin'",
    "OSError: [Errno 116] Stale file handle",
    "ValueError: cannot open index: [Errno 121] Remote I/O error: '/mnt/gcs/idx.json'",
    "datasets.builder.DatasetGenerationError: An error occurred while generating the dataset: "
    "[Errno 107] Transport endpoint is not connected",
])
def test_storage_errnos_inside_wrappers(tmp_path: Path, exc: str) -> None:
    text = (PROGRESS + "Traceback (most recent call last):\n  File \"train.py\", line 7, in "
            "<module>\n    ds = load(cfg)\n" + exc + "\n")
    assert alone(tmp_path, text) == "storage_io"


def test_aws_sdk_curl_errors_then_a_cut_traceback_is_storage(tmp_path: Path) -> None:
    # (was: python_exception) aws-sdk-cpp CurlHttpClient under TensorFlow's S3 filesystem
    text = PROGRESS + "".join(
        f"2026-01-09 10:0{i}:11.5{i}: E tensorflow/core/platform/s3/aws_logging.cc:60] Curl "
        "returned error code 28\n" for i in range(3)) + (
        "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n")
    assert alone(tmp_path, text) == "storage_io"


# ---- host memory seen from inside the program ----

@pytest.mark.parametrize("exc", [  # held before
    "MemoryError", "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 12.0 GiB for "
    "an array with shape (40000, 40000) and data type float64",
    "OSError: [Errno 12] Cannot allocate memory"])
def test_host_memory_from_inside(tmp_path: Path, exc: str) -> None:
    text = (PROGRESS + "Traceback (most recent call last):\n  File \"train.py\", line 7, in "
            "<module>\n    x = build()\n" + exc + "\n")
    assert alone(tmp_path, text) == "host_oom"


def test_memory_error_then_a_half_written_file_is_host_memory(tmp_path: Path) -> None:
    # (was: disk_full) torch.save ran out of host memory; closing the zip then failed
    ser = "/opt/conda/lib/python3.10/site-packages/torch/serialization.py"
    text = (PROGRESS + f"Traceback (most recent call last):\n  File \"{ser}\", line 441, in "
            f"save\n    _save(obj, opened_zipfile, pickle_module, pickle_protocol)\n  File "
            f"\"{ser}\", line 668, in _save\n    zip_file.write_record(name, storage, num_bytes)"
            f"\nMemoryError\n\nDuring handling of the above exception, another exception "
            f"occurred:\n\nTraceback (most recent call last):\n  File \"{ser}\", line 440, in "
            f"save\n    with _open_zipfile_writer(f) as opened_zipfile:\n  File \"{ser}\", line "
            "291, in __exit__\n    self.file_like.write_end_of_file()\nRuntimeError: [enforce "
            "fail at inline_container.cc:337] . unexpected pos 4412736 vs 4412630\n")
    assert alone(tmp_path, text) == "host_oom"


# ---- a watchdog, then an abort: the timeout is the cause (was: unknown / segfault) ----

def test_watchdog_frames_then_abort_is_the_timeout(tmp_path: Path) -> None:
    lib = "/opt/conda/lib/python3.10/site-packages/torch/lib"
    text = (PROGRESS + "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:618 (most recent call first):\n"
            f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f01 in "
            f"{lib}/libc10.so)\nframe #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout("
            f"std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x282 "
            f"(0x7f02 in {lib}/libtorch_cuda.so)\n"
            "run.sh: line 31: 4411 Aborted                 (core dumped) python train.py\n")
    assert verdict(tmp_path, text, exit_code=None, signal=6).cls == "collective_timeout"
    assert alone(tmp_path, text) == "collective_timeout"


def test_watchdog_then_segfault_in_teardown_is_the_timeout(tmp_path: Path) -> None:
    # held before
    text = (PROGRESS + "[rank3]:[E ProcessGroupNCCL.cpp:828] [Rank 3] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=912, OpType=BROADCAST, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=1800000) ran for 1800456 milliseconds before timing out.\n"
            "Fatal Python error: Segmentation fault\n\nThread 0x00007f3a (most recent call "
            "first):\n  File \"/x/torch/distributed/distributed_c10d.py\", line 3, in barrier\n")
    assert verdict(tmp_path, text, exit_code=None, signal=11).cls == "collective_timeout"


# ---- preemption as clouds say it (was: unknown) ----

@pytest.mark.parametrize("line", [
    "azureml.exceptions.ServiceException: PreemptionError",
    '{"DocumentIncarnation": 4, "Events": [{"EventId": "A1B2", "EventType": "Preempt", '
    '"ResourceType": "VirtualMachine", "Resources": ["trainer_0"], "EventStatus": "Scheduled"}]}',
    "WARNING: Spot instance interruption notice received; the instance stops in 2 minutes",
])
def test_cloud_preemption_wordings(tmp_path: Path, line: str) -> None:
    assert alone(tmp_path, PROGRESS + line + "\n") == "preempted"


# ---- hangs the log cannot prove: unknown, with the last line and its time (held before) ----

def test_a_log_that_just_stops_is_unknown_with_its_last_line_and_time(tmp_path: Path) -> None:
    v = verdict(tmp_path, timed(3, 12), exit_code=None)
    assert v.cls == "unknown"
    assert "03:11:07" in v.detail and "step 220" in v.detail


# ---- wordings the second real-world set showed (was: unknown / python_exception) ----

def test_invalid_device_function_is_the_build_not_the_program(tmp_path: Path) -> None:
    text = ("/opt/torch/bin/luajit: /opt/torch/share/lua/5.1/nn/THNN.lua:110: cuda runtime "
            "error (8) : invalid device function at /tmp/cutorch/lib/THC/THCTensorMath.cu:35\n")
    assert alone(tmp_path, PROGRESS + text) == "cuda_setup"


@pytest.mark.parametrize("tail", [
    "", "Original Traceback (most recent call last):\n  File \"/x/torch/utils/data/_utils/"
    "worker.py\", line 308, in _worker_loop\n    data = fetcher.fetch(index)\n"])
def test_loader_wrapper_naming_a_missing_file_when_the_worker_traceback_is_cut(
        tmp_path: Path, tail: str) -> None:
    text = (PROGRESS + "Traceback (most recent call last):\n  File \"train.py\", line 50, in "
            "<module>\n    for batch in loader:\n  File \"/x/torch/_utils.py\", line 461, in "
            "reraise\n    raise exception\nFileNotFoundError: Caught FileNotFoundError in "
            "DataLoader worker process 1.\n" + tail)
    assert alone(tmp_path, text) == "file_not_found"


# ---- container launch failures (pyxis / enroot; was: unknown) ----

@pytest.mark.parametrize("text,cls", [
    # the enroot log pyxis prints says why: the GPU hook, the registry's answer
    ("slurmstepd: error: pyxis: container start failed with error code: 1\n"
     "slurmstepd: error: pyxis: printing enroot log file:\n"
     "slurmstepd: error: pyxis:     nvidia-container-cli: initialization error: nvml error: "
     "driver not loaded\nslurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh"
     " exited with return code 1\nslurmstepd: error: pyxis: couldn't start container\n"
     "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n",
     "cuda_setup"),
    ("slurmstepd: error: pyxis: failed to import docker image\n"
     "slurmstepd: error: pyxis: printing enroot log file:\n"
     "slurmstepd: error: pyxis:     [ERROR] URL https://registry.example.org/v2/team/img/"
     "manifests/v3 returned error code: 401 Unauthorized\n"
     "slurmstepd: error: pyxis: couldn't start container\n", "permission_denied"),
])
def test_pyxis_enroot_log_decides(tmp_path: Path, text: str, cls: str) -> None:
    assert alone(tmp_path, text) == cls


def test_pyxis_failure_alone_says_the_container_did_not_start(tmp_path: Path) -> None:
    v = verdict(tmp_path, "slurmstepd: error: pyxis: container start failed with error code: 1\n"
                "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed "
                "with rc=-1\nslurmstepd: error: Failed to invoke spank plugin stack\n")
    assert v.cls == "cuda_setup" and v.confidence <= 0.6
    assert "container did not start" in v.detail and "credentials" in v.detail


# ---- a store timeout behind an NCCL set-up error; srun unable to reach a node ----

def test_nccl_unique_id_store_timeout_is_a_collective_timeout(tmp_path: Path) -> None:
    # (was: nccl_error) ProcessGroupNCCL.cpp broadcastUniqueNCCLID's store->get failing
    exc = ("torch.distributed.DistBackendError: [5] is setting up NCCL communicator and "
           "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
           "store->get('0') got error: Socket Timeout")
    text = (PROGRESS + "Traceback (most recent call last):\n  File \"train.py\", line 9, in "
            "<module>\n    dist.barrier()\n" + exc + "\n")
    assert alone(tmp_path, text) == "collective_timeout"


def test_srun_unable_to_launch_on_a_node_is_node_failure(tmp_path: Path) -> None:
    # (was: unknown) srun's launch error with slurm_strerror's words
    text = ("srun: error: Task launch for StepId=8812.0 failed on node gpu-31: Communication "
            "connection failure\nsrun: error: Application launch failed: Communication "
            "connection failure\nsrun: Job step aborted: Waiting up to 32 seconds for job step "
            "to finish.\n")
    assert alone(tmp_path, text) == "node_failure"


# ---- a traceback cut before (or inside) its exception line: what its last frames say ----
# Pasted excerpts, a log killed mid-write and a bounded tail stop inside a traceback. Where the
# last frames or the launcher's line just before say what raised, the class is theirs; the
# lines below are real programs' output (a real pickle, torch.save, torchrun), cut afterwards.

def _run(tmp_path: Path, py: str, code: str, name: str = "prog.py") -> str:
    prog = tmp_path / name
    prog.write_text(textwrap.dedent(code))
    p = subprocess.run([py, str(prog)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode != 0
    return p.stdout + p.stderr


def _cut_exception_line(text: str, keep: int) -> str:
    """The log cut `keep` characters into its last line (0: the line is gone)."""
    body, last = text.rstrip("\n").rsplit("\n", 1)
    return body + "\n" + (last[:keep] + "\n" if keep else "")


TRUNCATED_PICKLE = """\
    import pickle
    with open("weights.pkl", "wb") as f:
        f.write(pickle.dumps({"conv1": list(range(5000))})[:-4000])
    def load_pretrained(path):
        with open(path, "rb") as f:
            return pickle.load(f, encoding="latin1")
    load_pretrained("weights.pkl")
"""


@pytest.mark.parametrize("keep", [0, 10, 21, None])
def test_pickle_load_frame_cut_before_its_exception_is_checkpoint_corrupt(
        tmp_path: Path, keep) -> None:
    # (was: python_exception) pickle.load of a truncated weights file; the log cut inside the
    # exception line ("_pickle.Unpickl"), right after its last frame, or kept whole (held before)
    text = _run(tmp_path, sys.executable, TRUNCATED_PICKLE)
    assert "UnpicklingError: pickle data was truncated" in text
    cut = text if keep is None else _cut_exception_line(text, keep)
    assert alone(tmp_path, PROGRESS + cut) == "checkpoint_corrupt"


def test_a_generic_exception_from_pickle_loads_stays_generic(tmp_path: Path) -> None:
    # pickle.loads is also multiprocessing's IPC: its frame does not make a file unreadable
    text = (PROGRESS + "Traceback (most recent call last):\n  File \"worker.py\", line 40, in "
            "recv\n    msg = pickle.loads(buf)\n  File \"worker.py\", line 12, in __setstate__\n"
            "    raise ValueError('bad config')\nValueError: bad config\n")
    assert alone(tmp_path, text) == "python_exception"


TORCH_SAVE_ESTALE = """\
    import errno, io, torch
    class NfsFile(io.RawIOBase):
        def writable(self):
            return True
        def write(self, b):
            raise OSError(errno.ESTALE, "Stale file handle")
    def save_checkpoint(state):
        torch.save(state, NfsFile())
    save_checkpoint({"w": torch.zeros(1000)})
"""


@pytest.mark.skipif(not Path(TORCH_PY).exists(), reason="needs the torch venv (make test)")
def test_torch_save_cut_inside_its_frames_is_storage_io(tmp_path: Path) -> None:
    # (was: python_exception) a real torch.save whose file write fails; whole, its errno decides
    # (held before); cut after torch/serialization.py's save frames, the writer's frames do
    text = _run(tmp_path, TORCH_PY, TORCH_SAVE_ESTALE)
    assert "[Errno 116] Stale file handle" in text
    assert alone(tmp_path, PROGRESS + text) == "storage_io"
    first = text[:text.index("During handling")]
    cut = first[:first.index("in _save\n") + len("in _save\n")]
    assert alone(tmp_path, PROGRESS + cut) == "storage_io"


@pytest.mark.skipif(not Path(TORCH_PY).exists(), reason="needs the torch venv (make test)")
def test_an_object_torch_save_cannot_pickle_is_the_programs(tmp_path: Path) -> None:
    # the same frames with pickle's own error: the program's, not the storage's
    text = _run(tmp_path, TORCH_PY, """\
        import torch
        torch.save({"fn": lambda x: x}, "ckpt.pt")
    """)
    assert "Can't pickle" in text
    assert alone(tmp_path, PROGRESS + text) == "python_exception"


TORCHRUN_WAITING = """\
    import os, queue, time
    print(f"rank {os.environ['RANK']} epoch 0 step 0", flush=True)
    q = queue.Queue()
    def next_batch():
        return q.get(timeout=600)
    next_batch()
"""


@pytest.mark.skipif(not Path(TORCH_PY).exists(), reason="needs the torch venv (make test)")
def test_a_traceback_cut_after_torchrun_passed_on_sigint_is_cancelled(tmp_path: Path) -> None:
    # (was: python_exception) torchrun got SIGINT (Ctrl-C) and passed it on; the worker's
    # KeyboardInterrupt traceback cut before its last line: the job was interrupted
    import signal
    import time
    prog = tmp_path / "job.py"
    prog.write_text(textwrap.dedent(TORCHRUN_WAITING))
    log = tmp_path / "out.txt"
    with open(log, "wb") as out:
        p = subprocess.Popen([str(Path(TORCH_PY).parent / "torchrun"), "--nproc-per-node", "1",
                              "--monitor-interval", "0.2", str(prog)], stdout=out,
                             stderr=subprocess.STDOUT)
        for _ in range(600):
            if "epoch 0 step 0" in log.read_text():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    text = log.read_text()
    assert "Received 2 death signal" in text and "KeyboardInterrupt" in text
    assert alone(tmp_path, text) == "cancelled"  # held before: the whole log
    cut = text[:text.index("    return q.get(timeout=600)\n")] + "\n"
    assert "KeyboardInterrupt" not in cut
    assert alone(tmp_path, cut) == "cancelled"


@pytest.mark.parametrize("notice,cls", [
    ("srun: sending Ctrl-C to StepId=8812.0\n", "cancelled"),
    ("srun: sending Ctrl-C to job 8812.0\n", "cancelled"),
    # SIGTERM is a cancel, a time limit or a preemption: the cut traceback says no more
    ("WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting "
     "down workers\n", "python_exception"),
    ("", "python_exception"),
])
def test_cut_traceback_after_a_launchers_interrupt(tmp_path: Path, notice: str, cls: str) -> None:
    tb = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
          "    for batch in loader:\n  File \"/opt/conda/lib/python3.11/site-packages/torch/utils"
          "/data/dataloader.py\", line 1328, in _next_data\n    idx, data = self._get_data()\n")
    assert alone(tmp_path, PROGRESS + notice + tb) == cls


# ---- torch's watchdog timeout with its message cut after the head (was: nccl_error) ----

WATCHDOG = ("[rank3]:[E1102 04:14:29.224103812 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID "
            "0(default_pg) Rank 3] Process group watchdog thread terminated with exception: "
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4120, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
            "milliseconds before timing out.\n")
SOCKET_RETURNS = "".join(f"gpu-07:3121:3190 [{r}] NCCL INFO misc/socket.cc:{n} -> 3\n"
                         for r, n in ((0, 64), (0, 80), (1, 881), (3, 829)))


@pytest.mark.parametrize("keep", [None, 230, 200, 193])
def test_watchdog_timeout_cut_after_its_head_is_a_collective_timeout(tmp_path: Path,
                                                                     keep) -> None:
    line = WATCHDOG if keep is None else WATCHDOG[:keep] + "\n"
    assert "Watchdog caught" in line
    assert alone(tmp_path, PROGRESS + SOCKET_RETURNS + line) == "collective_timeout"


def test_watchdog_with_an_nccl_error_stays_an_nccl_error(tmp_path: Path) -> None:
    # held before: the watchdog's other exception is NCCL's own error
    line = ("[rank3]:[E1102 04:14:29.224 ProcessGroupNCCL.cpp:1537] [PG ID 0 PG GUID 0 Rank 3] "
            "Process group watchdog thread terminated with exception: NCCL error: remote process "
            "exited or there was a network error, NCCL version 2.21.5\n")
    assert alone(tmp_path, PROGRESS + SOCKET_RETURNS + line) == "nccl_error"


# ---- Open MPI losing a daemon its transport had just said was killed (was: node_failure) ----

def _orte_lost(remote: str, n: int = 1) -> str:
    # Open MPI 4's help-errmgr-base.txt, once per daemon lost
    bar = "-" * 74 + "\n"
    return (bar + "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : "
            "[[4242,0],0] on node gpu-11\n  Remote daemon: [[4242,0],1] on node " + remote
            + "\n\nThis is usually due to either a failure of the TCP network\nconnection to "
            "the node, or possibly an internal failure of\nthe daemon itself. We cannot "
            "recover from this failure, and\ntherefore will terminate the job.\n") * n + bar


@pytest.mark.parametrize("kill,n", [
    ("srun: error: gpu-12: task 1: Killed\n", 1),
    ("command terminated with exit code 137\n", 2),
])
def test_a_daemon_killed_then_lost_is_killed(tmp_path: Path, kill: str, n: int) -> None:
    assert alone(tmp_path, PROGRESS + kill + _orte_lost("gpu-12", n)) == "killed"


@pytest.mark.parametrize("before,state,cls", [
    ("", None, "node_failure"),  # held before: the loss alone
    ("srun: error: Node failure on gpu-12\n", None, "node_failure"),
    # Slurm's own state outranks any log line
    ("srun: error: gpu-12: task 1: Killed\n", "NODE_FAIL", "node_failure"),
    # a kill far before the loss is not that daemon's
    ("srun: error: gpu-12: task 1: Killed\n" + PROGRESS * 3, None, "node_failure"),
])
def test_a_daemon_lost_without_its_kill_is_a_node_failure(tmp_path: Path, before: str, state,
                                                           cls: str) -> None:
    (tmp_path / "run.0.log").write_text(PROGRESS + before + _orte_lost("gpu-12"))
    v = classify([TaskInput(str(tmp_path / "run.0.log"), rank=0, exit_code=1)],
                 JobFacts(exit_code=1, slurm_state=state))
    assert v.cls == cls, v.detail
