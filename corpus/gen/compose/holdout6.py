"""Held-out set 6's composed cases (templates `h6_*`): GPU failures no machine building the corpus
can cause, in wordings and frameworks the earlier sets' composers do not use (CuPy, ONNX
Runtime, numba.cuda, Horovod, cuBLAS handles, JAX on a GPU, GSP/NVLink Xids, Apptainer), plus
a few storage faults, node losses and a watchdog cascade. Each message follows the format of the
source that prints it (listed in corpus/holdout6/README.md); the surroundings reuse
kit.py's helpers and vary with the case id. A case's `how` names the template.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import (
    ASYNC,
    DSA,
    SITE,
    T0,
    _daemon_lost,
    _lost_task,
    _node_failure,
    _node_loss_times,
    _one_task,
    _pre,
    _rank_task,
    _ranked,
    _task,
    _tb,
    _user_frames,
    _write,
    catalogue,
    catalogued,
    compose,
    render,
)

CATALOGUE = catalogue(__name__)


def _bus(rng: random.Random) -> str:
    return f"0000:{rng.choice(['17', '31', '4b', '65', '98', 'b1', 'ca'])}:00"


def _kstamp(rng: random.Random) -> str:
    return f"[{rng.uniform(1e5, 9e5):.6f}]"


# ---------------------------------------------------------------- cuda_oom

cuda_oom = catalogued(CATALOGUE["cuda_oom"], globals())


def oom_srun(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """2 nodes x 2 ranks under srun --kill-on-bad-exit: rank `root` runs out of GPU memory, srun
    kills the others; the batch log carries srun's task lines."""
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    tasks = []
    for r in range(n):
        node = f"n{r // 2 + 1}"
        pre = _pre(rng, "detr-ft", rng.randrange(3, 6), dist=True, rank=r)
        if r == bad:
            msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB. GPU "
                   f"{r % 2} has a total capacity of 39.49 GiB of which 2.06 GiB is free. "
                   "Including "
                   "non-PyTorch memory, this process has 37.42 GiB memory in use. Of the allocated "
                   f"memory {rng.uniform(30, 34):.2f} GiB is allocated by PyTorch, and "
                   f"{rng.uniform(1, 3):.2f} GiB is reserved by PyTorch but unallocated. If "
                   "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
                   "expandable_segments:True to avoid fragmentation.  See documentation for "
                   "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#"
                   "environment-variables)")
            frames = _user_frames(rng) + [(f"{SITE}/torch/nn/functional.py",
                                           "multi_head_attention_forward",
                                           "attn_output_weights = torch.bmm(q_scaled, "
                                           "k.transpose(-2, -1))")]
            body, code, sig, t = _tb(rng, frames, msg), 1, None, end
        else:
            body, code, sig, t = "", None, 9, end + rng.uniform(1, 3)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, code, sig, t, node))
    bnode = f"n{bad // 2 + 1}"
    batch = (f"srun: error: {bnode}: task {bad}: Exited with exit code 1\n"
             f"srun: Terminating StepId={jid}.0\n"
             f"slurmstepd: error: *** STEP {jid}.0 ON n1 CANCELLED AT 2026-0{rng.randrange(1, 10)}"
             f"-1{rng.randrange(0, 9)}T1{rng.randrange(0, 9)}:{rng.randrange(10, 59)}:"
             f"{rng.randrange(10, 59)} ***\n"
             + "".join(f"srun: error: n{r // 2 + 1}: task {r}: Killed\n"
                       for r in range(n) if r != bad))
    _write(d, "batch.0.log", batch, tr, cid)
    tasks.insert(0, _task(root, d, "batch.0.log", 0, 1, None, round(end + 4, 3), node="n1",
                          step="batch"))
    return tasks, bad, "FAILED"


# ---------------------------------------------------------------- cuda_error

cuda_error = catalogued(CATALOGUE["cuda_error"], globals())


# ---------------------------------------------------------------- cuda_device_assert

def device_assert(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind == "index_select":  # embedding lookup with a token id past the vocabulary
        f = ("/opt/conda/conda-bld/pytorch_1708025845868/work/aten/src/ATen/native/cuda/"
             "Indexing.cu:1290")
        blk = rng.randrange(0, 400)
        lines = [f"{f}: indexSelectLargeIndex: block: [{blk},0,0], thread: [{t},0,0] Assertion "
                 "`srcIndex < srcSelectDimSize` failed."
                 for t in sorted(rng.sample(range(32, 128), rng.randrange(4, 9)))]
        frames = _user_frames(rng) + [(f"{SITE}/torch/nn/modules/sparse.py", "forward",
                                       "return F.embedding(")]
        return ("\n".join(lines) + "\n"
                + _tb(rng, frames, f"RuntimeError: CUDA error: device-side assert triggered\n"
                      f"{ASYNC}\n{DSA}"))
    if kind == "user_kernel":  # a CUDA C program's own assert(), then its error-check macro
        blk, thr = rng.randrange(0, 256), rng.randrange(0, 256)
        return ("grid 4096 x 256, halo 2\n"
                + "".join(f"stencil.cu:57: void apply_stencil(const float *, float *, int, int): "
                          f"block: [{blk + i},0,0], thread: [{thr},0,0] Assertion `idx < n` "
                          "failed.\n" for i in range(3))
                + "CUDA error at stencil.cu:141 code=710(cudaErrorAssert) "
                  "\"cudaDeviceSynchronize()\"\n")
    raise ValueError(kind)


def assert_torchrun(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """torchrun, 2 local ranks in one log: rank 1's labels exceed the class count
    (`nll_loss_forward_reduce_cuda_kernel_2d`), [rank1]-prefixed; the agent stops rank 0."""
    bad = p["root"]
    n = p["ranks"]
    pre = "".join(_pre(rng, "clf", rng.randrange(2, 4), dist=True, rank=r) for r in range(n))
    f = "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250"
    lines = "".join(f"{f}: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: "
                    f"[{t},0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
                    for t in sorted(rng.sample(range(64), 4)))
    frames = _user_frames(rng) + [(f"{SITE}/torch/nn/functional.py", "cross_entropy",
                                   "return torch._C._nn.cross_entropy_loss(")]
    tb = _tb(rng, frames, f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}")
    ranked = _ranked(tb, bad)
    t = f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}_0{rng.randrange(0, 9)}:1" \
        f"{rng.randrange(0, 9)}:3{rng.randrange(0, 9)}"
    summary = ("W1130 09:12:44.512000 2214 torch/distributed/elastic/multiprocessing/api.py:900] "
               f"Sending process {rng.randrange(1000, 99999)} closing signal SIGTERM\n"
               "E1130 09:12:45.130000 2214 torch/distributed/elastic/multiprocessing/api.py:874] "
               f"failed (exitcode: 1) local_rank: {bad} (pid: {rng.randrange(1000, 99999)}) of "
               "binary: /opt/conda/envs/train/bin/python\n"
               "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
               + "=" * 60 + "\ntrain_clf.py FAILED\n" + "-" * 60
               + "\nFailures:\n  <NO_OTHER_FAILURES>\n"
               + "-" * 60 + "\nRoot Cause (first observed failure):\n[0]:\n"
               f"  time      : {t}\n  host      : gpu-a40-09\n"
               f"  rank      : {bad} (local_rank: {bad})\n"
               f"  exitcode  : 1 (pid: {rng.randrange(1000, 99999)})\n  error_file: <N/A>\n"
               "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/"
               "errors.html\n" + "=" * 60 + "\n")
    return _one_task(root, d, pre + lines + ranked + summary, tr, cid,
                     T0 + rng.randrange(0, 10**6)), bad


# ---------------------------------------------------------------- nccl_error

def nccl(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    host = rng.choice(["dgx-a100-07", "gpu-h100-22", "hgx-l40s-3"])
    pid = rng.randrange(1000, 99999)
    ver = rng.choice(["2.19.3", "2.21.5", "2.23.4"])
    c10d = "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    if kind in CATALOGUE["nccl"]:  # the message texts: catalogue/holdout6.yaml
        return render(CATALOGUE["nccl"][kind], {**globals(), **locals()})
    if kind == "shm_extend":  # /dev/shm of the container too small for NCCL's SHM transport
        tag = "".join(rng.choice("abcdefghiJKLMNpqrs0123456789") for _ in range(6))
        shm = f"/dev/shm/nccl-{tag}"
        size = rng.choice([9637892, 33030144])
        warn = (f"{host}:{pid}:{pid + 77} [1] NCCL WARN Error: failed to extend {shm} to {size} "
                "bytes, error: No space left on device (28)")
        frames = _user_frames(rng)[:2] + [(f"{SITE}/torch/distributed/distributed_c10d.py",
                                           "all_reduce", "work = group.allreduce([tensor], opts)")]
        return (warn + "\n" + _tb(rng, frames, "torch.distributed.DistBackendError: NCCL error in: "
                                  f"{c10d}:{rng.randrange(1900, 3200)}, unhandled system error "
                                  f"(run with NCCL_DEBUG=INFO for details), NCCL version {ver}\n"
                                  "ncclSystemError: System call (e.g. socket, malloc) or external "
                                  "library call failed or device error. \nLast error:\nError: "
                                  f"failed to extend {shm} to {size} bytes, error: No space left "
                                  "on device (28)"))
    raise ValueError(kind)


def nccl_cascade(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """3 ranks on 3 nodes: rank `root`'s IB port goes down (NET/IB async event), its collective
    fails with ncclSystemError; the others' communicators are aborted after it."""
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    ver = "2.21.5"
    c10d = "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    tasks = []
    for r in range(n):
        host = f"gpu-{r + 11:02d}"
        pid = rng.randrange(1000, 99999)
        pre = _pre(rng, "llm-sft", rng.randrange(3, 5), dist=True, rank=r)
        frames = _user_frames(rng)[:2] + [(f"{SITE}/torch/distributed/distributed_c10d.py",
                                           "reduce_scatter_tensor",
                                           "work = group._reduce_scatter_base(output, input, "
                                           "opts)")]
        if r == bad:
            warn = (f"{host}:{pid}:{pid + 412} [{r}] NCCL WARN NET/IB : Got async event : port "
                    "error\n"
                    f"{host}:{pid}:{pid + 409} [{r}] NCCL WARN NET/IB : Got completion from peer "
                    f"10.2.0.{rng.randrange(2, 99)}<{rng.randrange(30000, 60000)}> with status=12 "
                    "opcode=0 len=0 vendor err 129 (Send) localGid fe80::ba3f:d2ff:fe11:2c41 "
                    "remoteGids fe80::ba3f:d2ff:fe11:2c0b\n")
            body = warn + _tb(rng, frames, f"torch.distributed.DistBackendError: NCCL error in: "
                              f"{c10d}:{rng.randrange(1900, 3200)}, unhandled system error (run "
                              f"with NCCL_DEBUG=INFO for details), NCCL version {ver}\n"
                              "ncclSystemError: System call (e.g. socket, malloc) or external "
                              "library call failed or device error. \nLast error:\nNET/IB : Got "
                              "async event : port error")
            t = end
        else:
            body = _tb(rng, frames, f"torch.distributed.DistBackendError: NCCL communicator was "
                       f"aborted on rank {r}.  Original reason for failure was: NCCL error: "
                       "remote process exited or there was a network error, NCCL version "
                       f"{ver}\nncclRemoteError: A call failed possibly due to a network error "
                       "or a remote process exiting prematurely.")
            t = end + rng.uniform(5, 30)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, 1, None, t, f"n{r + 1}"))
    return tasks, bad


# ---------------------------------------------------------------- gpu_hardware

def hw(rng: random.Random, p: dict) -> tuple[str | None, str]:
    """(kernel lines or None, what the job printed after its own preamble)."""
    bus = _bus(rng)
    st = _kstamp(rng)
    pid = rng.randrange(1000, 99999)
    kind = p["kind"]
    if kind == "gsp119":  # the GPU System Processor stops answering RM's RPCs
        kern = (f"{st} NVRM: Xid (PCI:{bus}): 119, pid={pid}, name=python, Timeout after 6s of "
                "waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) "
                "(0x20801348 0x4).\n"
                f"{st} NVRM: GPU{rng.randrange(0, 8)} GSP RPC buffer contains function 76 "
                "(GSP_RM_CONTROL) and data 0x0000000020801348 0x0000000000000004.\n")
        frames = _user_frames(rng)
        return kern, _tb(rng, frames, "torch.AcceleratorError: CUDA error: unspecified launch "
                         "failure\nSearch for `cudaErrorLaunchFailure' in https://docs.nvidia.com/"
                         "cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
                         f"{ASYNC}\n{DSA}")
    if kind == "nvlink74":  # a fatal NVLink error; what the job sees is NCCL's CUDA failure
        kern = (f"{st} NVRM: Xid (PCI:{bus}): 74, pid={pid}, name=python3, NVLink: fatal error "
                f"detected on link {rng.randrange(0, 12)}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n")
        warn = (f"{rng.choice(['dgx-b3', 'hgx-07'])}:{pid}:{pid + 90} [3] NCCL WARN Cuda failure "
                "'an illegal memory access was encountered'\n")
        frames = _user_frames(rng)[:2] + [(f"{SITE}/torch/distributed/distributed_c10d.py",
                                           "all_reduce", "work = group.allreduce([tensor], opts)")]
        return kern, warn + _tb(rng, frames, "torch.distributed.DistBackendError: NCCL error in: "
                                "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027, "
                                "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
                                "version 2.20.5\nncclUnhandledCudaError: Call to CUDA function "
                                "failed.\nLast error:\nCuda failure 'an illegal memory access was "
                                "encountered'")
    if kind == "gsp_heartbeat154":  # GSP heartbeat lost, the driver asks for a GPU reset
        kern = (f"{st} NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out\n"
                f"{st} NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs "
                f"{rng.randrange(10**9, 10**10)} heartbeat {rng.randrange(10**6, 10**8)} "
                f"heartbeatWithOffsetMs {rng.randrange(10**9, 10**10)} diff "
                f"{rng.randrange(6000, 90000)} timeout 5200\n"
                f"{st} NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to "
                "0x1 (GPU Reset Required)\n")
        frames = _user_frames(rng)
        return kern, _tb(rng, frames, "RuntimeError: CUDA error: unknown error\n"
                         f"{ASYNC}\n{DSA}")
    raise ValueError(kind)


# ---------------------------------------------------------------- device_mismatch

devmm = catalogued(CATALOGUE["devmm"], globals())


# ---------------------------------------------------------------- cuda_setup

cuda_setup = catalogued(CATALOGUE["cuda_setup"], globals())


# ---------------------------------------------------------------- storage_io

def storage(rng: random.Random, p: dict) -> tuple[str | None, str]:
    kind = p["kind"]
    st = _kstamp(rng)
    if kind == "ceph":  # a CephFS client loses its MDS session; reads fail with EIO
        ip = f"10.{rng.randrange(1, 99)}.{rng.randrange(1, 99)}.{rng.randrange(2, 99)}"
        kern = (f"{st} libceph: mds0 (1){ip}:6801 socket closed (con state OPEN)\n"
                f"{st} libceph: mds0 (1){ip}:6801 session reset\n"
                f"{st} ceph: mds0 closed our session\n"
                f"{st} ceph: mds0 reconnect denied\n")
        frames = [("/home/u/wds_train/train.py", "<module>", "for batch in loader:"),
                  (f"{SITE}/webdataset/tariterators.py", "tar_file_iterator",
                   "for tarinfo in stream:"),
                  ("/usr/lib/python3.10/tarfile.py", "next",
                   "tarinfo = self.tarinfo.fromtarfile(self)")]
        return kern, ("".join(f"shard {i:05d}: {rng.randrange(900, 1100)} samples\n"
                              for i in range(4))
                      + _tb(rng, frames, "OSError: [Errno 5] Input/output error"))
    if kind == "nfs_timeout":  # a soft-mounted NFS export stops answering; pyarrow read fails
        srv = rng.choice(["nas03", "fs-home2", "datastore1"])
        kern = (f"{st} nfs: server {srv} not responding, timed out\n"
                f"{st} nfs: server {srv} not responding, timed out\n")
        frames = [("/home/u/tabular/train_gbm.py", "<module>", "df = pd.read_parquet(path)"),
                  (f"{SITE}/pyarrow/parquet/core.py", "read",
                   "table = self._dataset.to_table("),
                  ("pyarrow/_dataset.pyx", "pyarrow._dataset.Dataset.to_table", ""),
                  ("pyarrow/error.pxi", "pyarrow.lib.check_status", "")]
        return kern, _tb(rng, frames, "OSError: [Errno 5] Error reading bytes from file. Detail: "
                         "[errno 5] Input/output error")
    raise ValueError(kind)


# ---------------------------------------------------------------- collective_timeout

def watchdog_22(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """torch 2.2/2.3's watchdog (`[E ProcessGroupNCCL.cpp:N] [Rank N] Watchdog caught …`, then
    `[PG 0 Rank N] Timeout at NCCL work: …`, the data-inconsistency note) on every rank but the
    stuck one, 2 nodes x 2 ranks under srun; the stuck rank is killed by srun later."""
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    seq = rng.randrange(200, 9000)
    tasks = []
    for r in range(n):
        pre = _pre(rng, "vit-l", rng.randrange(3, 6), dist=True, rank=r)
        if r == bad:
            body = (f"rank {r}: rebuilding the sampler index after a shard reload "
                    "(12,480,000 samples)\n")
            code, sig, t = None, 9, end + 40
        else:
            work = (f"WorkNCCL(SeqNum={seq}, OpType=_ALLGATHER_BASE, NumelIn=2359296, "
                    f"NumelOut={2359296 * n}, Timeout(ms)=600000)")
            body = (f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective "
                    f"operation timeout: {work} ran for {600000 + rng.randrange(10, 900)} "
                    "milliseconds before timing out.\n"
                    f"[rank{r}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {r}] Timeout at NCCL "
                    "work: "
                    f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.\n"
                    f"[rank{r}]:[E ProcessGroupNCCL.cpp:577] [Rank {r}] Some NCCL operations have "
                    "failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                    "subsequent GPU operations might run on corrupted/incomplete data.\n"
                    f"[rank{r}]:[E ProcessGroupNCCL.cpp:583] [Rank {r}] To avoid data "
                    "inconsistency, we are taking the entire process down.\n"
                    f"[rank{r}]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank {r}] Process group "
                    f"watchdog thread terminated with exception: [Rank {r}] Watchdog caught "
                    f"collective operation timeout: {work} ran for 600533 milliseconds before "
                    "timing out.\n"
                    "terminate called after throwing an instance of 'c10::DistBackendError'\n")
            code, sig, t = None, 6, end + rng.uniform(0, 3)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, code, sig, t, f"n{r // 2 + 1}"))
    return tasks, bad


# ---------------------------------------------------------------- node_failure

def node_lost(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    style = p["style"]
    end, jid, stamp = _node_loss_times(rng)
    if style == "prrte":  # Open MPI 5's runtime loses the daemon on a remote node
        text = ("".join(f"[ranks 0-15] t={i * 0.25:.2f} ns  max|v|={1.2 + i / 50:.3f}\n"
                        for i in range(8))
                + _daemon_lost(
                    "PRTE",
                    f"[prterun-cn{rng.randrange(100, 199)}-{rng.randrange(1000, 9999)}@0,0] on "
                    "node cn101",
                    f"[prterun-cn{rng.randrange(100, 199)}-{rng.randrange(1000, 9999)}@0,3] on "
                    "node cn104"))
        return _one_task(root, d, text, tr, cid, end), None, None
    if style in ("job4", "gloo2x2"):
        if style == "job4":  # 4 nodes x 1 rank, n4 lost: the batch step's JOB-level message
            n, per, lost = 4, 1, 4
        else:  # 2 nodes x 2 ranks, n2 lost: the survivors' gloo peers vanish first
            n, per, lost = 4, 2, 2
        lost_ranks = [r for r in range(n) if r // per + 1 == lost]
        batch = (_node_failure(f"n{lost}", f"JOB {jid}", stamp)
                 + "".join(f"srun: error: n{r // per + 1}: task {r}: Killed\n"
                           for r in range(n) if r not in lost_ranks))
        _write(d, "batch.0.log", batch, tr, cid)
        tasks = [_task(root, d, "batch.0.log", 0, None, 9, round(end + 30, 3), node="n1",
                       step="batch")]
        for r in range(n):
            text = "".join(f"[r{r}] iter {i * 100} loss {2.1 - i * 0.05:.3f}\n" for i in range(6))
            if style == "gloo2x2" and r not in lost_ranks:
                text += _tb(rng, _user_frames(rng)[:2] + [
                    (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce",
                     "work.wait()")],
                    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                    f"Connection closed by peer [10.1.0.{lost_ranks[0] + 20}]:"
                    f"{rng.randrange(20000, 60000)}")
            _write(d, f"0.{r}.log", text, tr, cid)
            if r in lost_ranks:
                tasks.append(_lost_task(root, d, f"0.{r}.log", r))
            else:
                code, sig = (1, None) if style == "gloo2x2" else (None, 9)
                tasks.append(_task(root, d, f"0.{r}.log", r, code, sig, round(end + 2 + r, 3),
                                   node=f"n{r // per + 1}", step="0"))
        return tasks, lost_ranks[0], "NODE_FAIL"
    raise ValueError(style)


# ---------------------------------------------------------------- build

def hw_log(rng: random.Random, p: dict) -> tuple[str | None, str]:
    """(the kernel's lines or None, the job's log: its preamble, then what it printed)."""
    kern, job = hw(rng, p)
    return kern, _pre(rng, "train", rng.randrange(3, 8)) + job


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `h6_*` case into `d`; return its label."""
    return compose(root, d, c, single={
        "h6_cuda_oom": cuda_oom, "h6_cuda_error": cuda_error, "h6_device_assert": device_assert,
        "h6_devmm": devmm, "h6_cuda_setup": cuda_setup, "h6_nccl": nccl},
        logged={"h6_hw": hw_log, "h6_storage": storage},
        multi={"h6_oom_srun": oom_srun, "h6_assert_torchrun": assert_torchrun,
               "h6_nccl_cascade": nccl_cascade, "h6_watchdog": watchdog_22, "h6_node": node_lost},
        plain=("cupy", "ort", "cupy_illegal", "numba_700", "user_kernel", "horovod",
               "apptainer_nv"))
