"""The family of classify/rules/45-collectives.yaml: NCCL, Gloo, Horovod and c10d store errors and
timeouts. A collective timeout's straggler (the rank that stopped answering, in one torchrun log
or across the job's logs) is its root rank; a peer's reset is a cascade, not a straggler; a gloo
peer-lost cascade is not NCCL; Horovod's stall inspector is a timeout and its shutdown a symptom
of another rank's error; NCCL's shared-memory transport out of space is NCCL's error. Benign
mentions (a retry that connected, a stall that resolved) stay what they were. Pure logic over
small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    EPOCH_PROGRESS,
    GLOO,
    MAIN_TB,
    PROGRESS,
    RUN_TB,
    SITE,
    TRAINING,
    USER,
    job_verdict,
    log_alone,
    task,
    tb_by_line,
    verdict,
    write,
)

from gpualert_slurm.classify import Cause, JobFacts, TaskInput, classify


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

_SHUTDOWN = ("horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This "
             "was caused by an exception on one of the ranks or an attempt to allreduce, "
             "allgather or broadcast a tensor after one of the ranks finished execution. If the "
             "shutdown was caused by an exception, you should see the exception in the log "
             "before the first shutdown message.\n")

_STALL = ("[2026-03-02 11:02:10.118: W /tmp/horovod/common/stall_inspector.cc:105] One or more "
          "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
          "are waiting for remainder of ranks for more than 60 seconds. This may indicate that "
          "different ranks are trying to submit different tensors or that only subset of ranks "
          "is submitting tensors, which will cause deadlock. \nMissing ranks:\n"
          "2: [allreduce.grad.fc.weight]\n")

_TB = ("Traceback (most recent call last):\n  File \"train.py\", line 90, in <module>\n"
       "    opt.step()\n  File \"horovod/torch/mpi_ops.py\", line 314, in synchronize\n"
       "    mpi_lib.horovod_torch_wait_and_clear(handle)\n")


def _wd(r: int, seq: int = 4410) -> str:
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    msg = (f"{pg} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
           "OpType=_ALLGATHER_BASE, NumelIn=8, NumelOut=24, Timeout(ms)=300000) ran for 300021 "
           "milliseconds before timing out.")
    return (f"[rank{r}]:[E1201 10:02:11.5 81 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
            f"616] {msg}\nterminate called after throwing an instance of "
            f"'c10::DistBackendError'\n  what():  {pg} Process group watchdog thread terminated "
            f"with exception: {msg}\n")


def _srun_job(tmp_path: Path, n: int, quiet: int | None) -> Cause:
    tasks, lines = [], ["job 77: ranks on n1, n2"]
    for r in range(n):
        node = f"n{r // 2 + 1}"
        if r == quiet:
            tasks.append(task(tmp_path, PROGRESS + "prefetching the next shard\n",
                              f"0.{r}.log", r, exit_code=None, signal=9, node=node,
                              end_time=1000.0 + 9))
        else:
            tasks.append(task(tmp_path, PROGRESS + _wd(r), f"0.{r}.log", r, exit_code=None,
                              signal=6, node=node, end_time=1000.0 + r * 0.1))
            lines.append(f"srun: error: {node}: task {r}: Aborted (core dumped)")
    lines += ["srun: Terminating StepId=77.0"]
    if quiet is not None:
        lines.append(f"srun: error: n{quiet // 2 + 1}: task {quiet}: Killed")
    tasks.append(task(tmp_path, "\n".join(lines) + "\n", "batch.0.log", 0, exit_code=1,
                      step="batch", node="n1", end_time=1010.0))
    return job_verdict(tasks, exit_code=1)


GLOO_RESET = ("[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read "
              "error [127.0.0.1]:{port}: Connection reset by peer\n")

GLOO_TMO = ("[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
            "unbound_buffer.cc:81] Timed out waiting 20000ms for recv operation to complete\n")

STOP = ("W1201 10:00:01.000000 900 torch/distributed/elastic/multiprocessing/api.py:1010] "
        "Sending process {pid} closing signal SIGTERM\n")

FAILED = ("E1201 10:00:01.100000 900 torch/distributed/elastic/multiprocessing/api.py:1002] "
          "failed (exitcode: 1) local_rank: {r} (pid: {pid}) of binary: /usr/bin/python3\n")


# ---- the straggler inside one torchrun log ----

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


@pytest.mark.parametrize("text", [
    _STALL + _TB + _SHUTDOWN,
    _STALL + "[2026-03-02 11:12:10.118: E /tmp/horovod/common/stall_inspector.cc:126] (repeat)\n"
    "One or more rank (marked by \"!\") is stalled for longer than 600 seconds. Will shutdown.\n"
    + _TB + _SHUTDOWN,
    "One or more rank (marked by \"!\") is stalled for longer than 300 seconds. Will shutdown.\n",
])
def test_horovod_stall_is_a_collective_timeout(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "step 100 loss 3.2\n" + text)
    assert v.cls == "collective_timeout", (v.cls, v.evidence)


def test_horovod_shutdown_is_a_symptom_of_another_ranks_error(tmp_path: Path) -> None:
    oom = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
           "    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
           "2.00 GiB. GPU 1 has a total capacity of 79.10 GiB of which 1.21 GiB is free.\n")
    t0 = task(tmp_path, "step 100 loss 3.2\n" + _TB + _SHUTDOWN, name="0.0.log", rank=0,
              end_time=1000.0)
    t1 = task(tmp_path, "step 100 loss 3.2\n" + oom, name="0.1.log", rank=1, end_time=1001.0)
    v = job_verdict([t0, t1])
    assert (v.cls, v.root_rank) == ("cuda_oom", 1), (v.cls, v.root_rank)
    alone = verdict(tmp_path, "step 100 loss 3.2\n" + _TB + _SHUTDOWN)
    assert alone.cls == "nccl_error" and alone.confidence < 0.6, (alone.cls, alone.confidence)


def test_a_stall_warning_that_resolved_does_not_decide(tmp_path: Path) -> None:
    text = (_STALL + "step 200 loss 3.0\nTraceback (most recent call last):\n"
            "  File \"train.py\", line 120, in <module>\n    save(ckpt)\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/run7/step200.pt'\n")
    assert verdict(tmp_path, text).cls == "file_not_found"


@pytest.mark.parametrize("msg", [
    "Read error [10.0.0.2]:41532: Connection reset by peer",
    "Connection closed by peer [10.0.0.2]:41532",
    "Socket closed [10.0.0.2]:41532",
    "writev [10.0.0.2]:41532: Broken pipe",
])
def test_gloo_peer_lost_alone_is_not_nccl(tmp_path: Path, msg: str) -> None:
    log = EPOCH_PROGRESS + "[rank0]: " + RUN_TB.replace("\n", "\n[rank0]: ").rstrip("[rank0]: ") \
        + GLOO.format(n=537, msg=msg)
    v = job_verdict([task(tmp_path, log, exit_code=1)])
    assert v.cls != "nccl_error", v.to_json()


def test_nccl_cascade_still_nccl_alone(tmp_path: Path) -> None:
    log = EPOCH_PROGRESS + ("[rank0]: RuntimeError: NCCL communicator was aborted on rank 0.\n")
    assert job_verdict([task(tmp_path, log, exit_code=1)]).cls == "nccl_error"


# ---- collective_timeout: c10d's store and socket timeouts ----

@pytest.mark.parametrize("exc", [
    "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while "
    "trying to connect to (gpu-a17, 29400).",
    "torch.distributed.DistStoreError: Timed out after 301 seconds waiting for clients. 3/4 "
    "clients joined.",
    "RuntimeError: Rank 2 failed to pass monitoredBarrier in 30000 ms",
    "torch.distributed.DistStoreError: Socket Timeout",
    "torch.distributed.DistStoreError: barrier timeout after 600000ms, key: /ckpt/barrier",
])
def test_c10d_store_timeouts(tmp_path: Path, exc: str) -> None:
    text = PROGRESS + tb_by_line(USER, (f"{SITE}/torch/distributed/distributed_c10d.py",
                                "init_process_group", "store, rank, world_size = next(it)"),
                         exc=exc)
    v = verdict(tmp_path, text)
    assert v.cls == "collective_timeout", v.to_json()


def test_c10d_address_in_use_is_not_a_timeout(tmp_path: Path) -> None:
    text = tb_by_line(USER, exc="torch.distributed.DistNetworkError: The server socket has failed "
                      "to listen on any local network address. port: 29500, useIpv6: false, code: "
                      "-98, name: EADDRINUSE, message: address already in use")
    assert verdict(tmp_path, text).cls != "collective_timeout"


def test_connect_retry_warning_then_success(tmp_path: Path) -> None:
    text = ("[W1130 10:02:11.523 socket.cpp:752] [c10d] The client socket has failed to connect "
            "to [node3]:29500 (errno: 111 - Connection refused).\n" + PROGRESS + "done\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


# ---- collective_timeout: the straggler is the root rank ----

@pytest.mark.parametrize("n, quiet", [(3, 1), (4, 2), (4, 0), (6, 3)])
def test_nccl_watchdog_quiet_rank_is_the_straggler(tmp_path: Path, n: int, quiet: int) -> None:
    # srun's "task r: Aborted (core dumped)" of each reporting rank is its watchdog's abort
    v = _srun_job(tmp_path, n, quiet)
    assert (v.cls, v.root_rank) == ("collective_timeout", quiet), (v.cls, v.root_rank, v.detail)
    assert "straggler" in v.detail


def test_nccl_watchdog_every_rank_reports_keeps_the_first(tmp_path: Path) -> None:
    v = _srun_job(tmp_path, 4, None)
    assert (v.cls, v.root_rank) == ("collective_timeout", 0), (v.cls, v.root_rank, v.detail)
    assert "straggler" not in v.detail


@pytest.mark.parametrize("reporting, stops, root", [
    ([0, 2], 2, 1),      # the one rank below the highest reporting one that reported nothing
    ([1, 2, 3], 1, 0),   # the quiet one is rank 0
    ([0, 1], 1, 2),      # ranks 0..1 all reported, one worker stopped: rank 2
    ([0], 2, 0),         # two stopped, no gap: which one is not clear - the reporting rank
    ([4, 5], 1, 4),      # ranks of another node (global ranks 4, 5): not clear
])
def test_torchrun_log_cut_before_its_summary(tmp_path: Path, reporting: list[int], stops: int,
                                            root: int) -> None:
    text = PROGRESS + "".join(
        f"[rank{r}]: Traceback (most recent call last):\n[rank{r}]:   File \"/u/train.py\", "
        f"line 40, in <module>\n[rank{r}]:     dist.all_gather(out, t)\n"
        + GLOO_TMO.format(r=r) for r in reporting)
    text += "".join(STOP.format(pid=7100 + k) for k in range(stops))
    text += FAILED.format(r=reporting[0] % 4, pid=7000) + "Traceback (most recent call last):\n"
    v = verdict(tmp_path, text)
    assert (v.cls, v.root_rank) == ("collective_timeout", root), (v.cls, v.root_rank, v.detail)


def test_torchrun_peer_reset_is_no_straggler(tmp_path: Path) -> None:
    # rank 0 lost its peer (a crash elsewhere), not a timeout: no straggler is named
    text = PROGRESS + GLOO_RESET.format(r=0, port=29500) + STOP.format(pid=7101)
    v = verdict(tmp_path, text)
    assert "straggler" not in v.detail, (v.cls, v.root_rank, v.detail)


@pytest.mark.parametrize("line", [
    "n7:3321:3390 [2] NCCL WARN Error: failed to extend /dev/shm/nccl-x9QpL2 to 9637892 bytes, "
    "error: No space left on device (28)",
    "n7:3321:3390 [2] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x9QpL2 "
    "(size 9637888), error: No space left on device (28)",
    "n7:3321:3390 [2] NCCL WARN Call to posix_fallocate failed : No space left on device",
])
def test_nccl_shared_memory_transport_full_is_nccl_error(tmp_path: Path, line: str) -> None:
    log = ("step 10 loss 2.1\n" + line + "\n" + MAIN_TB +
           "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
           "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n")
    v = verdict(tmp_path, log)
    assert v.cls == "nccl_error", v.to_json()


# ---- multi-node launchers' prefixes; NCCL errors inside a traceback ----

NCCL_TB = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
           "    dist.all_reduce(t)\ntorch.distributed.DistBackendError: NCCL error in: "
           "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
           "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\nncclSystemError: System "
           "call (e.g. socket, malloc) or external library call failed or device error.\n")


@pytest.mark.parametrize("prefix", ["worker-3: ", "10.2.0.17: ", "[1,5]<stderr>:"])
def test_launcher_prefixed_nccl_error_in_a_traceback(tmp_path: Path, prefix: str) -> None:
    # held before: pdsh's "host: ", DeepSpeed's runner (pdsh under it), mpirun --tag-output
    text = "".join(prefix + ln + "\n" for ln in (TRAINING + NCCL_TB).splitlines())
    assert log_alone(tmp_path, text) == "nccl_error"


def test_nccl_before_2_4_warn_lines_without_the_nccl_word(tmp_path: Path) -> None:
    # (was: unknown) debug.h's "host:pid:tid [dev] file:line WARN msg" and "INFO file:line -> N"
    text = TRAINING + "".join(
        f"gpu-n{n}:2201:2290 [{d}] include/socket.h:197 WARN Call to recv failed : Connection "
        f"reset by peer\ngpu-n{n}:2201:2290 [{d}] INFO bootstrap.cu:172 -> 2\n"
        for n, d in ((2, 0), (2, 1)))
    assert log_alone(tmp_path, text) == "nccl_error"


def test_nccl_bootstrap_connect_retries_at_the_end(tmp_path: Path) -> None:
    # (was: unknown) src/misc/socket.cc "Call to connect returned %s, retrying"
    text = TRAINING + "".join("gpu-n2:2201:2290 [0] NCCL INFO Call to connect returned Connection "
                              "refused, retrying\n" for _ in range(6))
    assert log_alone(tmp_path, text) == "nccl_error"


# ---- a watchdog, then an abort: the timeout is the cause (was: unknown / segfault) ----

def test_watchdog_frames_then_abort_is_the_timeout(tmp_path: Path) -> None:
    lib = "/opt/conda/lib/python3.10/site-packages/torch/lib"
    text = (TRAINING + "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:618 (most recent call first):\n"
            f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f01 in "
            f"{lib}/libc10.so)\nframe #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout("
            f"std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x282 "
            f"(0x7f02 in {lib}/libtorch_cuda.so)\n"
            "run.sh: line 31: 4411 Aborted                 (core dumped) python train.py\n")
    assert verdict(tmp_path, text, exit_code=None, signal=6).cls == "collective_timeout"
    assert log_alone(tmp_path, text) == "collective_timeout"


def test_watchdog_then_segfault_in_teardown_is_the_timeout(tmp_path: Path) -> None:
    # held before
    text = (TRAINING + "[rank3]:[E ProcessGroupNCCL.cpp:828] [Rank 3] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=912, OpType=BROADCAST, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=1800000) ran for 1800456 milliseconds before timing out.\n"
            "Fatal Python error: Segmentation fault\n\nThread 0x00007f3a (most recent call "
            "first):\n  File \"/x/torch/distributed/distributed_c10d.py\", line 3, in barrier\n")
    assert verdict(tmp_path, text, exit_code=None, signal=11).cls == "collective_timeout"


# ---- a store timeout behind an NCCL set-up error (was: nccl_error) ----

def test_nccl_unique_id_store_timeout_is_a_collective_timeout(tmp_path: Path) -> None:
    # (was: nccl_error) ProcessGroupNCCL.cpp broadcastUniqueNCCLID's store->get failing
    exc = ("torch.distributed.DistBackendError: [5] is setting up NCCL communicator and "
           "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
           "store->get('0') got error: Socket Timeout")
    text = (TRAINING + "Traceback (most recent call last):\n  File \"train.py\", line 9, in "
            "<module>\n    dist.barrier()\n" + exc + "\n")
    assert log_alone(tmp_path, text) == "collective_timeout"


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
    assert log_alone(tmp_path, TRAINING + SOCKET_RETURNS + line) == "collective_timeout"


def test_watchdog_with_an_nccl_error_stays_an_nccl_error(tmp_path: Path) -> None:
    # held before: the watchdog's other exception is NCCL's own error
    line = ("[rank3]:[E1102 04:14:29.224 ProcessGroupNCCL.cpp:1537] [PG ID 0 PG GUID 0 Rank 3] "
            "Process group watchdog thread terminated with exception: NCCL error: remote process "
            "exited or there was a network error, NCCL version 2.21.5\n")
    assert log_alone(tmp_path, TRAINING + SOCKET_RETURNS + line) == "nccl_error"


# ---- NCCL's verbs out of locked memory; a peer that failed torch's monitored barrier ----

@pytest.mark.parametrize("line", [
    "gn4:20117:20190 [1] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    "gn4:20117:20190 [1] NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory",
    "[1,6]<stderr>:gn4:20117:20190 [6] NCCL WARN Call to ibv_reg_mr_iova2 failed with error "
    "Cannot allocate memory",
    "gn4:20117:20190 [1] misc/ibvwrap.cu:212 WARN Call to ibv_reg_mr failed with error Cannot "
    "allocate memory",
])
def test_nccl_verbs_out_of_locked_memory_is_nccl_not_host_memory(tmp_path: Path,
                                                                 line: str) -> None:
    """ibv_* failing with ENOMEM is RLIMIT_MEMLOCK (ulimit -l), NCCL's set-up: was host_oom
    from the strerror text alone."""
    log = TRAINING + line + "\ngn4:20117:20190 [1] NCCL INFO transport/net_ib.cc:688 -> 2\n"
    v = verdict(tmp_path, log, exit_code=None)
    assert v.cls == "nccl_error" and "ulimit -l" in v.detail, v.to_json()
    v = verdict(tmp_path, log + MAIN_TB + "torch.distributed.DistBackendError: NCCL error in: "
                "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO "
                "for details), NCCL version 2.20.5\n")
    assert v.cls == "nccl_error", v.to_json()
    # the host's own allocation failing stays host memory
    assert log_alone(tmp_path, TRAINING + MAIN_TB + "OSError: [Errno 12] Cannot allocate "
                     "memory\n") == "host_oom"


def test_monitored_barrier_peer_error_names_the_faulty_rank(tmp_path: Path) -> None:
    """torch's monitored_barrier on rank 0 when rank 3's send/recv failed (was:
    python_exception, the RuntimeError's class)."""
    log = (TRAINING + MAIN_TB + "RuntimeError: Rank 0 successfully reached monitoredBarrier, "
           "but received errors while waiting for send/recv from rank 3. Please check rank 3 "
           "logs for faulty rank.\n")
    # a pasted log (no rank known): the barrier's failure, rank 3 named
    v = classify([TaskInput(write(tmp_path, "pasted.log", log))], JobFacts())
    assert v.cls == "collective_timeout" and v.root_rank == 3, v.to_json()
    # rank 0's log of a job: rank 3 is where to look
    assert verdict(tmp_path, log, exit_code=1).root_rank == 3


# ---- a rank that never reached rank 0's store ----

def c10d_retries(n: int, addr: str = "[gn7.hpc.example]:29400") -> str:
    """c10d's warning at each try of a client to connect to the TCPStore (socket.cpp)."""
    return "".join(f"[W{1103 + i // 60:04d} 09:{i % 60:02d}:12.004 socket.cpp:697] [c10d] The "
                   f"client socket has failed to connect to {addr} (errno: 111 - Connection "
                   "refused).\n" for i in range(n))


@pytest.mark.parametrize("addr", ["[gn7.hpc.example]:29400",
                                  "any network address of (gn7.hpc.example, 29400)"])
def test_a_log_ending_in_store_connect_retries_is_a_rendezvous_failure(
        tmp_path: Path, addr: str) -> None:
    """(was: unknown, the warning-level lines shadowed) the rank never joined; the store's
    address is in the verdict."""
    v = verdict(tmp_path, "loading model\n" + c10d_retries(6, addr), exit_code=None)
    assert v.cls == "collective_timeout" and "gn7.hpc.example" in v.detail, v.to_json()
    assert v.confidence <= 0.5
    # the signal that ended the job says more than the warnings
    assert verdict(tmp_path, c10d_retries(6, addr), exit_code=None, signal=9).cls == "killed"
    # retries at start-up, then a run that went through: success
    assert verdict(tmp_path, c10d_retries(2, addr) + TRAINING, exit_code=0).cls == "success"
    # and a real error later decides
    assert log_alone(tmp_path, c10d_retries(2, addr) + TRAINING + NCCL_TB) == "nccl_error"
