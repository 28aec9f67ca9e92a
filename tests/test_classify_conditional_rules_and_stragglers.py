"""Decision logic added for the weaknesses held-out set 3 showed (corpus/holdout3/README.md):
a rule's class that depends on another rule's line anywhere in the job (`if_seen`: XLA's
allocation failure is host memory unless a log names a GPU device), the straggler inside one
torchrun log, torchrun's own signal, an errno inside a library's error type, a non-finite grad
norm ending an exit-0 run. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import job_verdict, task

from gpualert_slurm.classify import load_rules
from gpualert_slurm.classify.rules import RuleError

XLA_OOM = ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating "
           "8589934592 bytes.\n")


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
    assert "Out of memory allocating" in v.evidence[0]["text"]


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


# ---- the straggler inside one torchrun log ----

def failures_block(entries: list[tuple[int, str]], root: int) -> str:
    """torchrun's ChildFailedError summary: (rank, exitcode line) entries, then the root."""
    out = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
           "============================================================\n"
           "train.py FAILED\n------------------------------------------------------------\n"
           "Failures:\n")
    for i, (rank, code) in enumerate(entries):
        out += (f"[{i + 1}]:\n  time      : 2026-11-30_06:28:35\n  host      : n1\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code}\n"
                "  error_file: <N/A>\n")
    return out + ("------------------------------------------------------------\n"
                  "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-30\n"
                  f"  host      : n1\n  rank      : {root} (local_rank: {root})\n"
                  "  exitcode  : 1 (pid: 101) \n"
                  "============================================================\n")


GLOO_TIMEOUT = ("[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer"
                ".cc:78] Timed out waiting 10000ms for recv operation to complete\n")


def test_torchrun_log_names_the_rank_the_launcher_stopped(tmp_path: Path) -> None:
    log = ("[default0]:step 0 loss 0.27\n[default1]:step 0 loss 0.36\n"
           + GLOO_TIMEOUT.format(r=0)
           + "W1130 api.py:1028] Sending process 24093 closing signal SIGTERM\n"
           + failures_block([(1, "-15 (pid: 24093)  (SIGTERM)")], root=0))
    v = job_verdict([task(tmp_path, log)])
    assert (v.cls, v.root_rank) == ("collective_timeout", 1)
    assert "straggler" in v.detail


def test_torchrun_straggler_among_three_ranks(tmp_path: Path) -> None:
    log = (GLOO_TIMEOUT.format(r=1) + GLOO_TIMEOUT.format(r=0)
           + failures_block([(1, "1 (pid: 11) "), (2, "-15 (pid: 12)  (SIGTERM)")], root=0))
    assert job_verdict([task(tmp_path, log)]).root_rank == 2


@pytest.mark.parametrize("other", [
    # the stopped rank reported a timeout too: it was no straggler
    GLOO_TIMEOUT.format(r=1),
    # another rank failed by itself: its error is the cause, not a silent rank
    "[rank2]: ValueError: unknown label 'bird' in shard 2\n",
])
def test_no_log_straggler_when_it_is_not_clear(tmp_path: Path, other: str) -> None:
    log = (GLOO_TIMEOUT.format(r=0) + other
           + failures_block([(1, "-15 (pid: 24093)  (SIGTERM)")], root=0))
    v = job_verdict([task(tmp_path, log)])
    assert v.root_rank != 1 and "straggler" not in v.detail


def test_two_stopped_ranks_name_no_straggler(tmp_path: Path) -> None:
    log = (GLOO_TIMEOUT.format(r=0)
           + failures_block([(1, "-15 (pid: 1)  (SIGTERM)"), (2, "-15 (pid: 2)  (SIGTERM)")],
                            root=0))
    v = job_verdict([task(tmp_path, log)])
    assert (v.cls, v.root_rank) == ("collective_timeout", 0)


# ---- torchrun's own signal ----

AGENT = ("W1130 api.py:753] Received {sig} death signal, shutting down workers\n"
         "W1130 api.py:1028] Sending process 14030 closing signal SIGTERM\n"
         "Traceback (most recent call last):\n"
         '  File "torch/distributed/run.py", line 1032, in <module>\n'
         "torch.distributed.elastic.multiprocessing.api.SignalException: Process 13677 got "
         "signal: {sig}\n")


@pytest.mark.parametrize("sig,cls", [(15, "killed"), (1, "killed"), (2, "cancelled")])
def test_torchrun_agent_signalled(tmp_path: Path, sig: int, cls: str) -> None:
    assert job_verdict([task(tmp_path, AGENT.format(sig=sig))]).cls == cls


def test_torchrun_agent_signalled_by_slurm_time_limit_is_time_limit(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, AGENT.format(sig=15))], slurm_state="TIMEOUT")
    assert v.cls == "time_limit"


# ---- errno inside a library's error type; meta tensors; HF hub ----

@pytest.mark.parametrize("line,cls", [
    ("safetensors._safetensors_rust.SafetensorError: Error while serializing: I/O error: No "
     "space left on device (os error 28)", "disk_full"),
    ("safetensors_rust.SafetensorError: Error while serializing: I/O error: Permission denied "
     "(os error 13)", "permission_denied"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: "
     "MetadataIncompleteBuffer", "checkpoint_corrupt"),
    ("IndexError: Read less bytes than requested", "checkpoint_corrupt"),
    ("NotImplementedError: Cannot copy out of meta tensor; no data!", "device_mismatch"),
    ("RuntimeError: Tensor.item() cannot be called on meta tensors", "device_mismatch"),
    ("OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/scratch/ckpt/run1/final'. Use `repo_type` argument if needed.", "file_not_found"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to "
     "locate the file on the Hub and we cannot find the requested files in the local cache.",
     "storage_io"),
])
def test_wording_classes(tmp_path: Path, line: str, cls: str) -> None:
    log = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n" + line
    assert job_verdict([task(tmp_path, log + "\n")]).cls == cls


# ---- a non-finite grad norm ending an exit-0 run ----

def test_grad_norm_nan_at_the_end_of_an_exit0_run_is_a_silent_failure(tmp_path: Path) -> None:
    log = "".join(f"step {i} loss 0.{i} grad_norm 1.{i}\n" for i in range(60))
    log += ("{'loss': '0.51', 'grad_norm': 'nan', 'learning_rate': '1e-3'}\n"
            "grad_norm is nan at step 61, stopping training.\ndone\n")
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert (v.cls, v.silent_failure) == ("nan_divergence", True)


def test_finite_grad_norms_and_an_early_nan_stay_success(tmp_path: Path) -> None:
    log = "step 0 grad_norm: nan (fp16 overflow, step skipped)\n"
    log += "".join(f"step {i} loss 0.{i} grad_norm: 1.{i}\n" for i in range(1, 80))
    v = job_verdict([task(tmp_path, log + "training finished\n", exit_code=0)])
    assert (v.cls, v.silent_failure) == ("success", False)
