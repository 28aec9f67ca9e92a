"""Held-out set 5's composed cases (templates `h5_*`): GPU failures, a few GPU wordings of other
classes, node losses and storage faults that no machine building the corpus can cause. Each
message follows the format of the source that prints it (listed in corpus/holdout5/README.md);
the surroundings reuse kit.py's preamble and traceback helpers and vary with the case id.
A case's `how` names the template and its parameters.
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

C10D = "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"


def _stamp(rng: random.Random) -> str:
    return (f"2026-0{rng.randrange(1, 10)}-{rng.randrange(10, 28)} {rng.randrange(10, 24)}:"
            f"{rng.randrange(10, 60)}:{rng.randrange(10, 60)}")


def _glog(rng: random.Random, sev: str, where: str, day: str = "0412 09:31") -> str:
    """A glog/absl line head as TensorFlow and XLA print it (MMDD hh:mm:ss.us thread file:line)."""
    return (f"{sev}{day}:{rng.randrange(10, 60)}.{rng.randrange(10**5, 10**6)} "
            f"{rng.randrange(1000, 99999):>6} {where}]")


def _torchrun_summary(rng: random.Random, script: str, root: int, code: int, others: list[int],
                      host: str) -> str:
    """torch.distributed.elastic's ChildFailedError block: root first observed, others -15."""
    t = f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}_0{rng.randrange(0, 9)}:1" \
        f"{rng.randrange(0, 9)}:3{rng.randrange(0, 9)}"
    lines = ["Traceback (most recent call last):",
             f'  File "{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", '
             f"line 355, in wrapper",
             "    return f(*args, **kwargs)",
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
             "=" * 60, f"{script} FAILED", "-" * 60, "Failures:"]
    for i, r in enumerate(others, 1):
        pid = rng.randrange(1000, 99999)
        lines += [f"[{i}]:", f"  time      : {t}", f"  host      : {host}",
                  f"  rank      : {r} (local_rank: {r})",
                  f"  exitcode  : -15 (pid: {pid})  (SIGTERM)",
                  "  error_file: <N/A>",
                  f"  traceback : Signal 15 (SIGTERM) received by PID {pid}"]
    lines += ["-" * 60, "Root Cause (first observed failure):", "[0]:", f"  time      : {t}",
              f"  host      : {host}", f"  rank      : {root} (local_rank: {root})",
              f"  exitcode  : {code} (pid: {rng.randrange(1000, 99999)}) ",
              "  error_file: <N/A>",
              "  traceback : To enable traceback see: "
              "https://pytorch.org/docs/stable/elastic/errors.html", "=" * 60]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- cuda_oom

def cuda_oom(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind in CATALOGUE["cuda_oom"]:  # the message texts: catalogue/holdout5.yaml
        return render(CATALOGUE["cuda_oom"][kind], {**globals(), **locals()})
    if kind == "tf_eager":  # TF eager op on the GPU whose BFC allocator is exhausted
        n = rng.choice([4294967296, 2147483648])
        warn = (f"{_glog(rng, 'W', 'bfc_allocator.cc:' + str(rng.randrange(420, 500)))} "
                f"Allocator (GPU_0_bfc) ran out of memory trying to allocate "
                f"{n / 2**30:.2f}GiB (rounded to {n})requested by op AddV2\n")
        frames = [("/home/u/tf_diffusion/train.py", "<module>", "loss = train_step(x, t)"),
                  ("/home/u/tf_diffusion/unet.py", "call", "h = h + self.time_proj(temb)")]
        return warn + _tb(rng, frames,
                          "tensorflow.python.framework.errors_impl.ResourceExhaustedError: "
                          "{{function_node __wrapped__AddV2_device_/job:localhost/replica:0/"
                          "task:0/device:GPU:0}} failed to allocate memory [Op:AddV2] name: ")
    if kind == "batch_search":  # accelerate's find_executable_batch_size halved down to zero
        out = "".join(f"[bs-search] trying per-device batch size {b}\n"
                      for b in (128, 64, 32, 16, 8, 4, 2, 1))
        frames = [("/home/u/eval_harness/run.py", "<module>", "results = evaluate(model)"),
                  (f"{SITE}/accelerate/utils/memory.py", "decorator",
                   'raise RuntimeError("No executable batch size found, reached zero.")')]
        return out + _tb(rng, frames,
                         "RuntimeError: No executable batch size found, reached zero.")
    raise ValueError(kind)


def oom_torchrun(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """torchrun, N local ranks: rank `root` runs out of GPU memory (torch >= 2.4 wording with the
    `[rankN]:` prefix); the agent SIGTERMs the others and prints its failure summary."""
    n, bad = p["ranks"], p["root"]
    host = rng.choice(["gpu-h100-04", "dgx-b07"])
    pre = "".join(_pre(rng, "sft", rng.randrange(2, 5), dist=True, rank=r) for r in range(n))
    msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {bad} has "
           f"a total capacity of 79.10 GiB of which 1.18 GiB is free. Including non-PyTorch "
           f"memory, this process has 77.91 GiB memory in use. Of the allocated memory "
           f"{rng.uniform(70, 74):.2f} GiB is allocated by PyTorch, and {rng.uniform(1, 3):.2f} "
           "GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
           "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
           "fragmentation.  See documentation for Memory Management  "
           "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    frames = _user_frames(rng) + [
        (f"{SITE}/torch/nn/functional.py", "cross_entropy",
         "return torch._C._nn.cross_entropy_loss(")]
    others = [r for r in range(n) if r != bad]
    text = (pre + _ranked(_tb(rng, frames, msg), bad)
            + f"W1130 10:2{rng.randrange(0, 9)}:14.{rng.randrange(10**5, 10**6)} "
              f"{rng.randrange(1000, 9999)} torch/distributed/elastic/multiprocessing/api.py:897]"
              f" Sending process {rng.randrange(1000, 99999)} closing signal SIGTERM\n"
            + _torchrun_summary(rng, "train_sft.py", bad, 1, others, host))
    return _one_task(root, d, text, tr, cid, T0 + rng.randrange(0, 10**6)), bad


# ---------------------------------------------------------------- cuda_error

def cuda_error(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind in CATALOGUE["cuda_error"]:  # the message texts: catalogue/holdout5.yaml
        return render(CATALOGUE["cuda_error"][kind], {**globals(), **locals()})
    if kind == "tf_illegal":  # TF's event poller aborts the process after a faulting kernel
        return (f"Epoch {rng.randrange(2, 9)}/50\n"
                f"{_glog(rng, 'E', 'cuda_event.cc:29')} Error polling for event status: failed "
                "to query event: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was "
                "encountered\n"
                f"{_glog(rng, 'F', 'gpu_event_mgr.cc:' + str(rng.randrange(200, 240)))} "
                "Unexpected Event status: 1\n"
                "Fatal Python error: Aborted\n\nCurrent thread 0x00007f3c9d7fa700 (most recent "
                "call first):\n  File \"/home/u/tf_seg/train.py\", line 88 in main\n")
    raise ValueError(kind)


# ---------------------------------------------------------------- cuda_device_assert

def device_assert(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind == "gather":  # torch >= 2.5's vectorized gather (embedding lookups past the table)
        f = "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16"
        fn = "vectorized_gather_kernel"
        cond = 'ind >=0 && ind < ind_dim_size && "vectorized gather kernel index out of bounds"'
        exc = (f"torch.AcceleratorError: CUDA error: device-side assert triggered\n"
               f"Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
               f"group__CUDART__TYPES.html for more information.\n{ASYNC}\n{DSA}")
    elif kind == "classnll_old":  # torch 1.x THCUNN wording
        f = "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108"
        fn, cond = "cunn_ClassNLLCriterion_updateOutput_kernel", "t >= 0 && t < n_classes"
        exc = ("RuntimeError: cuda runtime error (59) : device-side assert triggered at "
               "/pytorch/aten/src/THC/generic/THCTensorMath.cu:26")
    elif kind == "multinomial":  # sampling from probabilities that sum to zero
        f = "/opt/pytorch/aten/src/ATen/native/cuda/MultinomialKernel.cu:112"
        fn, cond = "binarySearchForMultinomial", "cumdist[size - 1] > static_cast<scalar_t>(0)"
        exc = f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}"
    elif kind == "inductor":  # tl.device_assert in a torch.compile-generated Triton kernel
        f = (f"/tmp/torchinductor_u{rng.randrange(100, 999)}/"
             f"{rng.choice(['ab', 'k7', 'zq'])}/c{rng.choice(['ab', 'k7', 'zq'])}"
             f"{rng.randrange(10**6, 10**7)}.py:{rng.randrange(20, 60)}")
        fn, cond = "unknown", "index out of bounds: 0 <= tmp3 < 50257"
        exc = f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}"
    else:
        raise ValueError(kind)
    lines = [f"{f}: {fn}: block: [{rng.randrange(0, 900)},0,0], thread: [{t},0,0] Assertion "
             f"`{cond}` failed." for t in sorted(rng.sample(range(128), rng.randrange(3, 7)))]
    frames = _user_frames(rng) + [(f"{SITE}/torch/nn/modules/sparse.py", "forward",
                                   "return F.embedding(")]
    return "\n".join(lines) + "\n" + _tb(rng, frames, exc)


# ---------------------------------------------------------------- nccl_error

def _nccl(rng: random.Random, kind: str, host: str, pid: int, rank: int) -> tuple[str, str]:
    """(NCCL's WARN line, the exception torch raised with it: torch >= 2.0's
    `NCCL error in: …, <reason>, NCCL version X` / `<ncclResult name>: <text>` / Last error)."""
    ver = rng.choice(["2.18.5", "2.20.5", "2.21.5"])
    peer = f"10.{rng.randrange(1, 200)}.{rng.randrange(1, 200)}.{rng.randrange(2, 250)}"
    warn, reason, result = {
        "ib_retry": (f"transport/net_ib.cc:{rng.randrange(1200, 1700)} NCCL WARN NET/IB : Got "
                     f"completion from peer {peer}<{rng.randrange(30000, 60000)}> with error 12, "
                     "opcode 129, len 0, vendor err 129 (Recv) localGid ::ffff:"
                     f"{peer.rsplit('.', 1)[0]}.9 remoteGid ::ffff:{peer}",
                     "remote process exited or there was a network error",
                     "ncclRemoteError: A call failed possibly due to a network error or a remote "
                     "process exiting prematurely."),
        "peer_access": (f"transport/p2p.cc:{rng.randrange(250, 400)} NCCL WARN Cuda failure "
                        "'peer access is not supported between these two devices'",
                        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                        "ncclUnhandledCudaError: Call to CUDA function failed."),
        "connect": (f"misc/socket.cc:{rng.randrange(450, 600)} NCCL WARN socketStartConnect: "
                    f"Connect to {peer}<{rng.randrange(30000, 60000)}> failed : Software caused "
                    "connection abort",
                    "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                    "ncclSystemError: System call (e.g. socket, malloc) or external library call "
                    "failed or device error. "),
    }[kind]
    line = f"{host}:{pid}:{pid + rng.randrange(20, 300)} [{rank}] {warn}"
    exc = (f"torch.distributed.DistBackendError: NCCL error in: {C10D}:"
           f"{rng.randrange(1700, 3100)}, {reason}, NCCL version {ver}\n{result}\nLast error:\n"
           f"{warn.split('NCCL WARN ')[1]}")
    return line, exc


def nccl(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    host = rng.choice(["hgx-a100-31", "gpu-l40s-06", "dgx-h100-18"])
    n, bad = p.get("ranks", 1), p.get("root", 0)
    end = T0 + rng.randrange(0, 10**6)
    tasks = []
    for r in range(n):
        pid = rng.randrange(1000, 99999)
        pre = _pre(rng, "pretrain-7b", rng.randrange(2, 5), dist=True, rank=r)
        op = rng.choice(["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor"])
        frames = _user_frames(rng)[:2] + [(f"{SITE}/torch/distributed/distributed_c10d.py", op,
                                           "work = group.allreduce([tensor], opts)")]
        if r == bad:
            warn, exc = _nccl(rng, p["kind"], host, pid, r)
            body, t = warn + "\n" + _tb(rng, frames, exc), end
        else:  # the others' communicators are aborted once the root's failure is known
            body = _tb(rng, frames, f"torch.distributed.DistBackendError: NCCL communicator was "
                       f"aborted on rank {r}.  Original reason for failure was: NCCL error: "
                       "remote process exited or there was a network error")
            t = end + rng.uniform(3, 40)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, 1, None, t, f"n{r // 2 + 1}",
                                alone=n == 1))
    return tasks, (bad if n > 1 else None)


# ---------------------------------------------------------------- gpu_hardware

def hw(rng: random.Random, p: dict) -> tuple[str | None, str]:
    """(kernel lines or None, what the job printed)."""
    bus = f"{rng.randrange(0x10, 0xe0):02x}"
    stamp = f"[{rng.uniform(1e5, 9e5):.6f}]"
    pid = rng.randrange(1000, 99999)
    kind = p["kind"]
    if kind == "xid94":
        kern = (f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 94, pid={pid}, name=python3, "
                "Contained: SM (0x1). RST: No, D-RST: No\n")
        return kern, ("RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
                      f"{ASYNC}\n{DSA}")
    if kind == "nvlink":
        return None, (f"RuntimeError: CUDA error: uncorrectable NVLink error detected during the "
                      f"execution\n{ASYNC}\n{DSA}")
    if kind == "pcie_aer":
        kern = (f"{stamp} pcieport 0000:{int(bus, 16) - 1:02x}:01.0: AER: Uncorrected (Fatal) "
                f"error received: 0000:{bus}:00.0\n"
                f"{stamp} nvidia 0000:{bus}:00.0: AER: PCIe Bus Error: severity=Uncorrected "
                "(Fatal), type=Inaccessible, (Unregistered Agent ID)\n"
                f"{stamp} NVRM: GPU at PCI:0000:{bus}:00: GPU-{rng.randrange(16**8):08x}-"
                f"{rng.randrange(16**4):04x}-{rng.randrange(16**4):04x}-{rng.randrange(16**4):04x}"
                f"-{rng.randrange(16**12):012x}\n"
                f"{stamp} NVRM: GPU Board Serial Number: 1{rng.randrange(10**12, 10**13)}\n"
                f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n")
        return kern, f"RuntimeError: CUDA error: unspecified launch failure\n{ASYNC}\n{DSA}"
    if kind == "row_remap":  # the job's own epilogue prints the row remapper state
        job = (f"RuntimeError: CUDA error: uncorrectable ECC error encountered\n{ASYNC}\n{DSA}\n"
               "+ nvidia-smi -q -d ROW_REMAPPER -i 3\n\n==============NVSMI LOG==============\n\n"
               f"GPU 00000000:{bus}:00.0\n    Remapped Rows\n        Correctable Error         "
               "     : 0\n        Uncorrectable Error            : 3\n        Pending            "
               "            : Yes\n        Remapping Failure Occurred     : Yes\n")
        return None, job
    raise ValueError(kind)


# ---------------------------------------------------------------- device_mismatch

devmm = catalogued(CATALOGUE["devmm"], globals())


# ---------------------------------------------------------------- cuda_setup

cuda_setup = catalogued(CATALOGUE["cuda_setup"], globals())


# ---------------------------------------------------------------- collective_timeout

def watchdog_new(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """torch >= 2.4's watchdog (`[PG ID 0 PG GUID 0(default_pg) Rank N]`, NumelIn/NumelOut, the
    heartbeat monitor) on every rank but the stuck one, which the launcher stops later."""
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    seq = rng.randrange(3000, 90000)
    numel = rng.choice([1, 131072000, 4096])
    tasks = []
    for r in range(n):
        pre = _pre(rng, "moe-pretrain", rng.randrange(3, 6), dist=True, rank=r)
        if r == bad:
            body, code, sig, t = "", None, 15, end + 35
        else:
            head = (f"[rank{r}]:[E{rng.randrange(1, 13):02d}{rng.randrange(10, 29)} "
                    f"0{rng.randrange(1, 9)}:{rng.randrange(10, 60)}:{rng.randrange(10, 60)}."
                    f"{rng.randrange(10**5, 10**6)} {rng.randrange(1000, 99999)} "
                    "ProcessGroupNCCL.cpp:")
            work = (f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, "
                    f"NumelOut={numel}, Timeout(ms)=600000)")
            body = (f"{head}632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught "
                    f"collective operation timeout: {work} ran for "
                    f"{600000 + rng.randrange(10, 900)} milliseconds before timing out.\n"
                    f"{head}2271] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure detected by "
                    f"watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, "
                    f"last completed work: {seq - 1}\n"
                    f"{head}670] Stack trace of the failed collective not found, potentially "
                    "because FlightRecorder is disabled. You can enable it by setting "
                    "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.\n"
                    f"{head}2106] [PG ID 0 PG GUID 0(default_pg) Rank {r}] First PG on this rank "
                    "to signal dumping.\n"
                    f"{head}1595] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Heartbeat monitor "
                    "timed out! Process will be terminated after dumping debug info. "
                    "workMetaList_.size()=1\n"
                    "terminate called after throwing an instance of 'c10::DistBackendError'\n"
                    f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process group "
                    f"watchdog thread terminated with exception: [Rank {r}] Watchdog caught "
                    f"collective operation timeout: {work} ran for 600411 milliseconds before "
                    "timing out.\n")
            code, sig, t = None, 6, end + rng.uniform(0, 4)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, code, sig, t, f"n{r + 1}"))
    return tasks, bad


# ---------------------------------------------------------------- node_failure

def node_lost(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    style = p["style"]
    end, jid, stamp = _node_loss_times(rng)
    if style == "srun3":  # 3 nodes, one rank each; n3 dies (its rank leaves no exit record)
        batch = ("+ srun -N 3 --ntasks-per-node=1 python -u train_gnn.py\n"
                 + _node_failure("n3", f"STEP {jid}.0", stamp)
                 + "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
                 "srun: error: n1: task 0: Killed\nsrun: error: n2: task 1: Killed\n")
        _write(d, "batch.0.log", batch, tr, cid)
        tasks = [_task(root, d, "batch.0.log", 0, None, 9, round(end + 35, 3), node="n1",
                       step="batch")]
        for r in range(3):
            text = "".join(f"[gnn r{r}] epoch {e} | edges/s {rng.randrange(8, 12)}.{r}M | "
                           f"val_mrr {0.31 + e / 100:.3f}\n" for e in range(7))
            _write(d, f"0.{r}.log", text, tr, cid)
            if r < 2:
                tasks.append(_task(root, d, f"0.{r}.log", r, None, 9, round(end + 3 + r, 3),
                                   node=f"n{r + 1}", step="0"))
            else:
                tasks.append(_lost_task(root, d, f"0.{r}.log", r))
        return tasks, 2, "NODE_FAIL"
    if style == "openmpi":  # mpirun loses the daemon on a remote node
        orte = rng.randrange(10000, 60000)
        text = ("".join(f"[r0] iteration {i:4d}  residual {10 ** -(i / 40):.3e}\n"
                        for i in range(0, 400, 40))
                + _daemon_lost("ORTE", f"[[{orte},0],0] on node cn0{rng.randrange(10, 99)}",
                               f"[[{orte},0],2] on node cn1{rng.randrange(10, 99)}"))
        return _one_task(root, d, text, tr, cid, end), None, None
    if style == "batch_only":  # a single-node batch job whose node went down: the log just stops
        text = "".join(f"epoch {e} step {s} loss {2.5 - e * 0.1 - s / 5000:.4f}\n"
                       for e in range(3) for s in range(0, 2000, 250))
        _write(d, "batch.0.log", text, tr, cid)
        return [_lost_task(root, d, "batch.0.log", 0, "batch")], None, "NODE_FAIL"
    raise ValueError(style)


# ---------------------------------------------------------------- storage_io

def storage(rng: random.Random, p: dict) -> tuple[str | None, str]:
    kind = p["kind"]
    if kind == "lustre":
        fs = rng.choice(["scratch", "lustre1", "work"])
        ost = f"{fs}-OST00{rng.randrange(10, 40):02x}"
        nid = f"10.{rng.randrange(1, 99)}.{rng.randrange(1, 99)}.{rng.randrange(2, 99)}@o2ib"
        stamp = f"[{rng.uniform(1e5, 9e5):.6f}]"
        osc = f"{ost}-osc-ffff9a{rng.randrange(16**10):010x}"
        kern = (f"{stamp} LustreError: 11-0: {osc}: "
                f"operation ost_read to node {nid} failed: rc = -107\n"
                f"{stamp} Lustre: {osc}: Connection to "
                f"{ost} (at {nid}) was lost; in progress operations using this service will wait "
                "for recovery to complete\n"
                f"{stamp} LustreError: 167-0: {osc}: "
                "This client was evicted by " + ost + "; in progress operations using this "
                "service will fail.\n")
        frames = [("/home/u/wds/train.py", "<module>", "for batch in loader:"),
                  ("/home/u/wds/shards.py", "__iter__", "buf = f.read(1 << 20)")]
        return kern, _tb(rng, frames, "OSError: [Errno 5] Input/output error")
    if kind == "botocore":
        bucket = rng.choice(["lab-datasets", "llm-shards"])
        url = (f"https://s3.{rng.choice(['us-east-1', 'eu-west-1'])}.amazonaws.com/{bucket}/"
               f"train/shard-{rng.randrange(10**5):06d}.tar")
        frames = [("/home/u/s3stream/loader.py", "<module>", "for sample in ds:"),
                  ("/home/u/s3stream/loader.py", "fetch", "body = obj['Body'].read()"),
                  (f"{SITE}/botocore/response.py", "read",
                   "raise ReadTimeoutError(endpoint_url=e.url, error=e)")]
        return None, _tb(rng, frames, "botocore.exceptions.ReadTimeoutError: Read timeout on "
                         f'endpoint URL: "{url}"')
    raise ValueError(kind)


# ---------------------------------------------------------------- build

def hw_log(rng: random.Random, p: dict) -> tuple[str | None, str]:
    """(the kernel's lines or None, the job's log: its preamble, then the traceback)."""
    kern, job = hw(rng, p)
    return kern, _pre(rng, "train", rng.randrange(3, 8)) + _tb(rng, _user_frames(rng), job)


def storage_log(rng: random.Random, p: dict) -> tuple[str | None, str]:
    """(the kernel's lines or None, the job's log: the shards it read, then the failure)."""
    kern, job = storage(rng, p)
    return kern, "".join(f"shard {i}: {rng.randrange(900, 1100)} samples\n" for i in range(5)) + job


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `h5_*` case into `d`; return its label."""
    return compose(root, d, c, single={
        "h5_cuda_oom": cuda_oom, "h5_cuda_error": cuda_error, "h5_device_assert": device_assert,
        "h5_devmm": devmm, "h5_cuda_setup": cuda_setup},
        logged={"h5_hw": hw_log, "h5_storage": storage_log},
        multi={"h5_oom_torchrun": oom_torchrun, "h5_nccl": nccl, "h5_watchdog": watchdog_new,
               "h5_node": node_lost},
        plain=("vllm", "tf_illegal", "batch_search", "driver_mismatch"), aborted=("tf_illegal",))
