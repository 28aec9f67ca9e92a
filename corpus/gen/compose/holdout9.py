"""Held-out set 9's composed cases (templates `h9_*`): GPU failures no machine building the corpus
can cause, through stacks the earlier sets' composers do not use (CuPy, RAPIDS RMM/cuDF, Numba
CUDA, bitsandbytes, flash-attn, PyTorch Geometric, FSDP2, torch.multiprocessing.spawn, Lightning
Fabric), Xids 48 / 74 / 119, a BeeGFS I/O fault, and node losses seen by a spawn job's batch
step, srun and Ray. Each message follows the documented format of the tool that prints it
(written here from those formats, not copied from any log); the surroundings reuse kit.py's
helpers and vary with the case id. `how` names the template.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import (
    ASYNC,
    DSA,
    SITE,
    T0,
    _pre,
    _task,
    _tb,
    _user_frames,
    _write,
    after_preamble,
    catalogue,
    compose,
    render,
)

CATALOGUE = catalogue(__name__)


def _kstamp(rng: random.Random) -> str:
    return f"[{rng.uniform(1e5, 9e5):.6f}]"


def _bus(rng: random.Random) -> str:
    return f"0000:{rng.choice(['1b', '3d', '4b', '65', '9a', 'b1', 'cb'])}:00"


def _spawn_block(rank: int, frames: list[tuple[str, str, str]], exc: str, rng,
                 script: str = "/home/u/gnn/train.py") -> str:
    """torch.multiprocessing.spawn's re-raise in the parent for the failed process `rank`."""
    tb = _tb(rng, [(f"{SITE}/torch/multiprocessing/spawn.py", "_wrap", "fn(i, *args)"), *frames],
             exc)
    head = _tb(rng, [(script, "<module>", "mp.spawn(worker, args=(world,), "
                      "nprocs=world, join=True)"),
                     (f"{SITE}/torch/multiprocessing/spawn.py", "spawn", "return start_"
                      "processes(fn, args, nprocs, join, daemon, start_method=\"spawn\")"),
                     (f"{SITE}/torch/multiprocessing/spawn.py", "start_processes",
                      "while not context.join():"),
                     (f"{SITE}/torch/multiprocessing/spawn.py", "join",
                      "raise ProcessRaisedException(msg, error_index, failed_process.pid)")],
             "torch.multiprocessing.spawn.ProcessRaisedException: ")
    return head + f"\n-- Process {rank} terminated with the following error:\n" + tb


# ---------------------------------------------------------------- one-log GPU failures

def single(rng: random.Random, p: dict) -> tuple[str, bool]:
    """The job's text for `kind`, and whether the usual training preamble goes before it."""
    kind = p["kind"]
    uf = _user_frames(rng)
    if kind in CATALOGUE["single"]:  # the message texts: catalogue/holdout9.yaml
        return render(CATALOGUE["single"][kind], {**globals(), **locals()})
    if kind == "pyg_assert":
        asserts = "".join(
            "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:144: operator(): block: "
            f"[{rng.randrange(0, 900)},0,0], thread: [{t},0,0] Assertion `idx_dim >= 0 && "
            "idx_dim < index_size && \"index out of bounds\"` failed.\n"
            for t in rng.sample(range(128), 4))
        return ("GraphSAGE: 2,449,029 nodes, 61,859,140 edges, fan-out [15, 10]\n" + asserts
                + _tb(rng, uf + [(f"{SITE}/torch_geometric/nn/conv/sage_conv.py", "forward",
                                  "out = self.propagate(edge_index, x=x, size=size)"),
                                 (f"{SITE}/torch_geometric/utils/_scatter.py", "scatter",
                                  "return src.new_zeros(size).scatter_add_(dim, index, src)")],
                      f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}\n")
                ), True
    if kind == "one_hot_assert":
        asserts = "".join(
            "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: "
            f"[{rng.randrange(0, 300)},0,0], thread: [{t},0,0] Assertion `-sizes[i] <= index && "
            "index < sizes[i] && \"index out of bounds\"` failed.\n"
            for t in rng.sample(range(128), 5))
        return (asserts + _tb(rng, uf + [("/home/u/seg/losses.py", "dice_loss",
                                          "onehot = torch.eye(num_classes, device=t.device)"
                                          "[target]")],
                              f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}"
                              f"\n{DSA}\n")), True
    if kind == "spawn_nll_assert":
        asserts = "".join(
            "/pytorch/aten/src/ATen/native/cuda/NLLLoss2d.cu:104: nll_loss2d_forward_kernel: "
            f"block: [{rng.randrange(0, 64)},0,0], thread: [{t},0,0] Assertion `t >= 0 && t < "
            "n_classes` failed.\n" for t in rng.sample(range(512), 4))
        frames = [("/home/u/seg/train.py", "worker", "loss = criterion(logits, mask)"),
                  (f"{SITE}/torch/nn/functional.py", "cross_entropy",
                   "return torch._C._nn.cross_entropy_loss(")]
        return ("".join(f"[rank {r}] epoch 0 step 120 loss {1.3 + r / 10:.3f}\n" for r in range(4))
                + asserts + "\n" + _spawn_block(1, frames, "RuntimeError: CUDA error: "
                                                f"device-side assert triggered\n{ASYNC}\n{DSA}\n",
                                                rng, "/home/u/seg/train.py")), False
    if kind == "nccl_spawn":
        frames = [("/home/u/gnn/train.py", "worker", "dist.all_reduce(grad_buf)"),
                  (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce",
                   "work = group.allreduce([tensor], opts)")]
        return _spawn_block(2, frames, "torch.distributed.DistBackendError: NCCL error in: "
                            "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
                            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
                            "version 2.20.5\nncclUnhandledCudaError: Call to CUDA function failed."
                            "\nLast error:\nCuda failure 'an illegal memory access was "
                            "encountered'", rng), True
    raise ValueError(kind)


# ---------------------------------------------------------------- kernel + job

def storage(rng: random.Random, p: dict) -> tuple[str | None, str]:
    if p["kind"] == "beegfs":  # the BeeGFS client loses its storage target; reads fail with EIO
        kern = (f"{_kstamp(rng)} beegfs: Communication error: Retrying ... (Node: storage04 "
                "[ID: 104]; Msg: ReadLocalFileV2; Peer: 10.20.0.44:8003)\n"
                f"{_kstamp(rng)} beegfs: Retries exhausted, giving up. (Node: storage04 [ID: "
                "104]; Target: 417)\n")
        frames = _user_frames(rng)[:2] + [
            ("/home/u/vision/data.py", "__getitem__", "arr = np.load(self.files[i])"),
            (f"{SITE}/numpy/lib/_npyio_impl.py", "load", "magic = fid.read(N)")]
        return kern, (_pre(rng, "convnext", rng.randrange(3, 6))
                      + _tb(rng, frames, "OSError: [Errno 5] Input/output error"))
    raise ValueError(p["kind"])


def hw(rng: random.Random, p: dict) -> tuple[str | None, str]:
    kind, bus = p["kind"], _bus(rng)
    pid = rng.randrange(10000, 99999)
    if kind == "xid48":
        kern = (f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 48, pid={pid}, name=python, An "
                "uncorrectable double bit error (DBE) has been detected on GPU in the "
                "framebuffer at partition 3, subpartition 1.\n"
                f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 63, pid={pid}, name=python, Row Remapper: "
                "New row (0x0000000004f1a2c0) Marked for Remap\n")
        return kern, _tb(rng, _user_frames(rng), "RuntimeError: CUDA error: uncorrectable ECC "
                         f"error encountered\n{ASYNC}\n{DSA}")
    if kind == "xid74":
        kern = (f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 74, pid={pid}, name=python, NVLink: "
                "fatal error detected on link 7(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n")
        job = (f"gpu-n{rng.randrange(10, 60)}:{pid}:{pid + 7} [2] NCCL INFO Channel 05/0 : 2[2] -> "
               "3[3] via P2P/CUMEM/read\n"
               + _tb(rng, _user_frames(rng), "RuntimeError: CUDA error: an uncorrectable NVLink "
                     f"error was detected during the execution\n{ASYNC}\n{DSA}"))
        return kern, job
    if kind == "xid119":
        kern = (f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 119, pid={pid}, name=python, Timeout "
                "after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 "
                "(GSP_RM_CONTROL) (0x20800a6a 0x4).\n"
                f"{_kstamp(rng)} NVRM: GPU{rng.randrange(0, 8)} GSP RPC buffer contains "
                "function 76 (GSP_RM_CONTROL) and data 0x0000000020800a6a 0x0000000000000004.\n")
        job = ("step 3100: checkpoint saved\n"
               + _tb(rng, _user_frames(rng), "RuntimeError: CUDA error: unspecified launch "
                     f"failure\n{ASYNC}\n{DSA}")
               + f"nvidia-smi: Unable to determine the device handle for GPU{bus}.0: "
               "Unknown Error\n")
        return kern, job
    raise ValueError(kind)


# ---------------------------------------------------------------- node losses

def node_lost(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    style = p["style"]
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    stamp = f"2026-11-30T0{rng.randrange(0, 9)}:{rng.randrange(10, 59)}:{rng.randrange(10, 59)}"
    if style == "batch":  # a one-node mp.spawn job: the node is lost, only the batch log remains
        text = ("launching 8 workers with torch.multiprocessing.spawn\n"
                + "".join(f"[rank {r}] epoch 4 step 900 loss {0.71 + r / 100:.3f}\n"
                          for r in range(8))
                + f"slurmstepd: error: *** JOB {jid} ON gpu-n21 CANCELLED AT {stamp} DUE TO NODE "
                "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n")
        _write(d, "batch.0.log", text, tr, cid)
        return [_task(root, d, "batch.0.log", 0, None, 9, end, node="gpu-n21", step="batch")], \
            None, "NODE_FAIL"
    if style == "srun2":
        lost = 1
        batch = ("srun: error: Node failure on gpu-n4\n"
                 f"slurmstepd: error: *** STEP {jid}.0 ON gpu-n3 CANCELLED AT {stamp} DUE TO NODE "
                 "FAILURE ***\n"
                 "srun: error: gpu-n3: task 0: Killed\n")
        _write(d, "batch.0.log", batch, tr, cid)
        tasks = [_task(root, d, "batch.0.log", 0, None, 9, round(end + 30, 3), node="gpu-n3",
                       step="batch")]
        for r in range(2):
            text = "".join(f"[rank: {r}] step {i * 50} loss {2.1 - i * 0.05:.3f}\n"
                           for i in range(6))
            _write(d, f"0.{r}.log", text, tr, cid)
            if r == lost:
                tasks.append({"log": str((d / f"0.{r}.log").relative_to(root)), "rank": r,
                              "node": None, "step": "0", "exit_code": None, "signal": None,
                              "core_dumped": False, "end_time": None})
            else:
                tasks.append(_task(root, d, f"0.{r}.log", r, None, 9, round(end + 2, 3),
                                   node="gpu-n3", step="0"))
        return tasks, lost, "NODE_FAIL"
    if style == "ray":  # a Ray Train job: the worker node is lost, the head reports it and fails
        nid = f"{rng.randrange(16**12):012x}"
        text = ("(TorchTrainer pid=4411) Started distributed worker processes\n"
                + "".join(f"(RayTrainWorker pid={4500 + r}, ip=10.1.0.{20 + r}) epoch 1 loss "
                          f"{0.9 - r / 50:.3f}\n" for r in range(4))
                + f"(raylet) The node with node id: {nid}... and address: 10.1.0.22 and node "
                "name: 10.1.0.22 has been marked dead because the detector has missed too many "
                "heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly "
                "(OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy "
                "workload.\n"
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this "
                "task.\n\tclass_name: RayTrainWorker\n\tThe actor died because its node has "
                "died. Node Id: " + nid + "\n"
                "srun: error: Node failure on gpu-n22\n")
        _write(d, "run.0.log", text, tr, cid)
        return [_task(root, d, "run.0.log", 0, 1, None, end)], None, "NODE_FAIL"
    raise ValueError(style)


# ---------------------------------------------------------------- build

def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `h9_*` case into `d`; return its label."""
    return compose(root, d, c, single={"h9_single": single},
                   logged={"h9_hw": after_preamble(hw), "h9_storage": storage},
                   multi={"h9_node": node_lost}, aborted=("fsdp2_watchdog",))
