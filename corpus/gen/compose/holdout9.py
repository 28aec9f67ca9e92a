"""Held-out set 9's composed cases (templates `h9_*`): GPU failures no machine building the corpus
can cause, through stacks the earlier sets' composers do not use (CuPy, RAPIDS RMM/cuDF, Numba
CUDA, bitsandbytes, flash-attn, PyTorch Geometric, FSDP2, torch.multiprocessing.spawn, Lightning
Fabric), Xids 48 / 74 / 119, a BeeGFS I/O fault, and node losses seen by a spawn job's batch
step, srun and Ray. Each message follows the documented format of the tool that prints it
(written here from those formats, not copied from any log); the surroundings reuse synthetic.py's
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
    compose,
)


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
    if kind == "cupy_oom":
        n = rng.choice([2147483648, 4294967296, 8589934592])
        return _tb(rng, uf[:2] + [("/home/u/sim/features.py", "pairwise", "d = cp.empty((n, n), "
                                   "dtype=cp.float32)"),
                                  ("cupy/_creation/basic.py", "empty", "return cupy.ndarray(shape,"
                                   " dtype, order=order)"),
                                  ("cupy/_core/core.pyx", "cupy._core.core.ndarray.__new__", ""),
                                  ("cupy/cuda/memory.pyx", "cupy.cuda.memory.alloc", "")],
                   f"cupy.cuda.memory.OutOfMemoryError: Out of memory allocating {n:,} bytes "
                   f"(allocated so far: {rng.randrange(10**9, 7 * 10**10):,} bytes)."), True
    if kind == "rmm_oom":
        return ("cuDF: reading 48 parquet files into GPU memory\n"
                + _tb(rng, [("/home/u/etl/featurize.py", "<module>", "df = cudf.read_parquet("
                             "paths)"),
                            (f"{SITE}/cudf/io/parquet.py", "read_parquet", "return _parquet_to_"
                             "frame("),
                            ("parquet.pyx", "cudf._lib.parquet.read_parquet", "")],
                      "MemoryError: std::bad_alloc: out_of_memory: CUDA error at: /opt/conda/"
                      "include/rmm/mr/device/cuda_memory_resource.hpp:60: "
                      "cudaErrorMemoryAllocation out of memory")), False
    if kind == "bnb_oom":
        gib = rng.choice([1.95, 3.91, 7.81])
        return _tb(rng, uf + [(f"{SITE}/bitsandbytes/nn/modules.py", "forward",
                               "out = bnb.matmul_4bit(x, self.weight.t(), bias=bias, "
                               "quant_state=self.weight.quant_state)"),
                              (f"{SITE}/bitsandbytes/functional.py", "dequantize_4bit",
                               "out = torch.empty(quant_state.shape, dtype=quant_state.dtype, "
                               "device=A.device)")],
                   f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib:.2f} "
                   f"GiB. GPU 0 has a total capacity of 23.65 GiB of which {gib / 3:.2f} GiB is "
                   "free. Including non-PyTorch memory, this process has 23.10 GiB memory in "
                   "use. Of the allocated memory 21.87 GiB is allocated by PyTorch, and 812.40 "
                   "MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
                   "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                   "to avoid fragmentation."), True
    if kind == "numba_illegal":
        return ("numba: launching histogram kernel on 65536 blocks x 256 threads\n"
                + _tb(rng, [("/home/u/sim/hist.py", "<module>", "counts = d_counts.copy_to_"
                             "host()"),
                            (f"{SITE}/numba/cuda/cudadrv/devicearray.py", "copy_to_host",
                             "_driver.device_to_host(hostary, self, self.alloc_size,"),
                            (f"{SITE}/numba/cuda/cudadrv/driver.py", "device_to_host",
                             "fn(host_pointer(dst), device_pointer(src), size, *varargs)"),
                            (f"{SITE}/numba/cuda/cudadrv/driver.py", "safe_cuda_api_call",
                             "self._check_ctypes_error(fname, retcode)")],
                      "numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuMemcpyDtoH "
                      "results in CUDA_ERROR_ILLEGAL_ADDRESS")), False
    if kind == "cupy_illegal":
        return _tb(rng, uf[:2] + [("/home/u/sim/kernels.py", "scatter_add", "_kern((blocks,), "
                                   "(256,), (idx, vals, out, n))"),
                                  ("cupy/_core/raw.pyx", "cupy._core.raw.RawKernel.__call__", ""),
                                  ("cupy_backends/cuda/api/driver.pyx",
                                   "cupy_backends.cuda.api.driver.check_status", "")],
                   "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: "
                   "an illegal memory access was encountered"), True
    if kind == "flash_illegal":
        return _tb(rng, uf + [(f"{SITE}/flash_attn/flash_attn_interface.py", "forward",
                               "out, softmax_lse, S_dmask, rng_state = _flash_attn_varlen_"
                               "forward("),
                              (f"{SITE}/flash_attn/flash_attn_interface.py",
                               "_flash_attn_varlen_forward", "out, softmax_lse, S_dmask, "
                               "rng_state = flash_attn_cuda.varlen_fwd(")],
                   f"RuntimeError: CUDA error: an illegal memory access was encountered\n{ASYNC}"
                   f"\n{DSA}\n"), True
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
    if kind == "nccl_ib":
        host = f"gpu-n{rng.randrange(10, 60)}"
        return (f"{host}:{rng.randrange(1000, 9999)}:{rng.randrange(1000, 9999)} [3] "
                "transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                "10.12.0.31<42571> with status=12 opcode=0 len=0 vendor err 129 (Recv) "
                "localGid ::ffff:10.12.0.17 remoteGidsfe80::ba3f:d2ff:fe14:6a20 hca mlx5_2\n"
                + _tb(rng, uf + [(f"{SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives"
                                  ".py", "foreach_reduce", "dist.reduce_scatter_tensor("),
                                 (f"{SITE}/torch/distributed/distributed_c10d.py",
                                  "reduce_scatter_tensor", "work = group._reduce_scatter_base("
                                  "output, input, opts)")],
                      "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                      "distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or "
                      "there was a network error, NCCL version 2.21.5\nncclRemoteError: A call "
                      "failed possibly due to a network error or a remote process exiting "
                      "prematurely.\nLast error:\nNET/IB : Got completion from peer 10.12.0.31"
                      "<42571> with status=12 opcode=0 len=0 vendor err 129 (Recv)")), True
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
    if kind == "nccl_invalid":  # NCCL_SOCKET_IFNAME names an interface this node lacks
        host = f"gpu-n{rng.randrange(10, 60)}"
        pid = rng.randrange(1000, 99999)
        return (f"{host}:{pid}:{pid} [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0\n"
                f"{host}:{pid}:{pid} [0] NCCL WARN Bootstrap : no socket interface found\n"
                f"{host}:{pid}:{pid} [0] NCCL INFO init.cc:1890 -> 3\n"
                + _tb(rng, uf[:2] + [("/home/u/llm/parallel.py", "init_tp_group",
                                      "dist.barrier(group=tp_group)"),
                                     (f"{SITE}/torch/distributed/distributed_c10d.py", "barrier",
                                      "work = group.barrier(opts=opts)")],
                      "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                      "distributed/c10d/ProcessGroupNCCL.cpp:2027, internal error - please report"
                      " this issue to the NCCL developers, NCCL version 2.21.5\n"
                      "ncclInternalError: Internal check failed.\nLast error:\nBootstrap : no "
                      "socket interface found")), True
    if kind == "fsdp2_watchdog":
        seq = rng.randrange(20000, 90000)
        r = rng.randrange(1, 8)
        return (f"[rank{r}]:[E1130 10:{rng.randrange(10, 59)}:{rng.randrange(10, 59)}."
                f"{rng.randrange(100000, 999999)} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
                f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType="
                "_REDUCE_SCATTER_BASE, NumelIn=268435456, NumelOut=33554432, Timeout(ms)=600000) "
                "ran for 600042 milliseconds before timing out.\n"
                f"[rank{r}]:[E1130 10:31:07.004112 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID "
                f"0(default_pg) Rank {r}] failure detected by watchdog at work sequence id: "
                f"{seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}\n"
                f"[rank{r}]:[E1130 10:31:07.004390 ProcessGroupNCCL.cpp:646] Some NCCL "
                "operations have failed or timed out. Due to the asynchronous nature of CUDA "
                "kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
                f"[rank{r}]:[E1130 10:31:07.004451 ProcessGroupNCCL.cpp:652] To avoid data "
                "inconsistency, we are taking the entire process down.\n"), True
    if kind == "cupy_driver":
        return ("import cupy: ok\n"
                + _tb(rng, [("/home/u/sim/run.py", "<module>", "x = cp.arange(10)"),
                            ("cupy/_creation/ranges.py", "arange", "ret = cupy.empty((size,), "
                             "dtype=dtype)"),
                            ("cupy/cuda/device.pyx", "cupy.cuda.device.Device.__enter__", ""),
                            ("cupy_backends/cuda/api/runtime.pyx",
                             "cupy_backends.cuda.api.runtime.check_status", "")],
                      "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorInsufficient"
                      "Driver: CUDA driver version is insufficient for CUDA runtime version")
                ), False
    if kind == "pyg_devices":
        return _tb(rng, uf + [(f"{SITE}/torch_geometric/nn/conv/gcn_conv.py", "forward",
                               "edge_index, edge_weight = gcn_norm(  # yapf: disable"),
                              (f"{SITE}/torch_geometric/nn/conv/gcn_conv.py", "gcn_norm",
                               "deg = scatter(edge_weight, idx_col, dim=0, dim_size=num_nodes, "
                               "reduce='sum')")],
                   "RuntimeError: Expected all tensors to be on the same device, but found at "
                   "least two devices, cuda:0 and cpu! (when checking argument for argument index "
                   "in method wrapper_CUDA_scatter_add_)"), True
    if kind == "fabric_devices":
        return ("Fabric: 1 x cuda, precision bf16-mixed\n"
                + _tb(rng, [("/home/u/fab/train.py", "<module>", "main(fabric)"),
                            ("/home/u/fab/train.py", "main", "loss = model(x, y)"),
                            ("/home/u/fab/model.py", "forward", "h = self.emb(x) + self.pos"),
                            ],
                      "RuntimeError: Expected all tensors to be on the same device, but found at "
                      "least two devices, cuda:0 and cpu!")), False
    if kind == "cupy_device":
        return _tb(rng, uf[:2] + [("/home/u/sim/bridge.py", "to_torch",
                                   "t = torch.as_tensor(arr, device='cuda:1')"),
                                  ("/home/u/sim/bridge.py", "mix", "out = t @ w")],
                   "RuntimeError: Expected all tensors to be on the same device, but found at "
                   "least two devices, cuda:1 and cuda:0! (when checking argument for argument "
                   "mat2 in method wrapper_CUDA_mm)"), True
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
