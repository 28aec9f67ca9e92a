"""Held-out set 8's composed cases (templates `h8_*`): GPU failures no machine building the corpus
can cause, through stacks the earlier sets' composers do not use (TensorRT, vLLM, PaddlePaddle,
Triton kernels, DeepSpeed ZeRO-3, torchmetrics, enroot/pyxis containers, exclusive-process
GPUs, row-remapping / contained-ECC Xids), plus Lustre and GPFS I/O faults, DeepSpeed and Horovod
collective stalls, and node losses seen by MPICH's Hydra, srun and a Dask scheduler. Each message
follows the documented format of the tool that prints it (written here, not copied from any log);
the surroundings reuse kit.py's helpers and vary with the case id. `how` names the template.
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


def _trt_stamp(rng: random.Random) -> str:
    return (f"[11/{rng.randrange(10, 30)}/2026-{rng.randrange(10, 23)}:{rng.randrange(10, 59)}:"
            f"{rng.randrange(10, 59)}]")


def _glog(rng: random.Random) -> str:
    return f"E1130 {rng.randrange(10, 23)}:{rng.randrange(10, 59)}:{rng.randrange(10, 59)}." \
           f"{rng.randrange(100000, 999999)} {rng.randrange(1000, 99999)}"


def _bus(rng: random.Random) -> str:
    return f"0000:{rng.choice(['1b', '3d', '4b', '65', '9a', 'b1', 'cb'])}:00"


def _kstamp(rng: random.Random) -> str:
    return f"[{rng.uniform(1e5, 9e5):.6f}]"


def _vllm_info(rng: random.Random, msg: str, sec: int) -> str:
    return f"INFO 11-30 10:1{sec // 60}:{sec % 60:02d} {msg}"


# ---------------------------------------------------------------- one-log GPU failures

def single(rng: random.Random, p: dict) -> tuple[str, bool]:
    """The job's text for `kind`, and whether the usual training preamble goes before it."""
    kind = p["kind"]
    if kind in CATALOGUE["single"]:  # the message texts: catalogue/holdout8.yaml
        return render(CATALOGUE["single"][kind], {**globals(), **locals()})
    if kind == "vllm_kv":  # vLLM: the weights fit, nothing is left for the KV cache
        frames = [("/home/u/eval/run_vllm.py", "<module>",
                   "llm = LLM(model=args.model, tensor_parallel_size=1, "
                   "gpu_memory_utilization=0.6)"),
                  (f"{SITE}/vllm/engine/llm_engine.py", "_initialize_kv_caches",
                   "self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)"),
                  (f"{SITE}/vllm/worker/worker.py", "raise_if_cache_size_invalid",
                   "raise ValueError(\"No available memory for the cache blocks. \"")]
        return ("\n".join([
            _vllm_info(rng, "llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: "
                       "model='/models/llama-3-70b-instruct-awq', dtype=torch.float16, "
                       "max_seq_len=8192", 3),
            _vllm_info(rng, "model_runner.py:1067] Loading model weights took 37.0837 GB", 95),
            _vllm_info(rng, "gpu_executor.py:122] # GPU blocks: 0, # CPU blocks: 819", 131),
        ]) + "\n" + _tb(rng, frames, "ValueError: No available memory for the cache blocks. "
                        "Try increasing `gpu_memory_utilization` when initializing the "
                        "engine.")), False
    if kind == "paddle_oom":  # PaddlePaddle's allocator, its error-summary layout
        total = rng.uniform(36, 38)
        return ("[2026/11/30 10:12:44] ppocr INFO: epoch: [3/500], global_step: 1200, lr: "
                "0.001000, loss: 1.734211, avg_batch_cost: 0.51233 s\n"
                + _tb(rng, [("/work/PaddleOCR/tools/train.py", "<module>", "main(config, device, "
                             "logger, vdl_writer)"),
                            ("/work/PaddleOCR/tools/program.py", "train",
                             "preds = model(images, data=batch[1:])")],
                      "MemoryError: \n\n" + "-" * 38 + "\nC++ Traceback (most recent call last):\n"
                      + "-" * 38 + "\n0   paddle::memory::allocation::CUDAAllocator::AllocateImpl"
                      "(unsigned long)\n\n" + "-" * 22 + "\nError Message Summary:\n" + "-" * 22
                      + "\nResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot "
                      f"allocate 4.000000GB memory on GPU 0, {total:.6f}GB memory has been "
                      f"allocated and available memory is only {39.4 - total:.6f}GB.\n\n"
                      "Please check whether there is any other process using GPU 0.\n"
                      "1. If yes, please stop them, or start PaddlePaddle on another GPU.\n"
                      "2. If no, please decrease the batch size of your model. \n"
                      " (at /paddle/paddle/fluid/memory/allocation/cuda_allocator.cc:86)\n"),
                True)
    if kind == "samples_719":  # a CUDA C solver's checkCudaErrors after a faulting kernel
        return ("lattice 512^3, 4000 sweeps\n"
                + "".join(f"sweep {i * 500:5d}  E/N = {-1.9 + i * 0.003:.5f}\n" for i in range(5))
                + "CUDA error at lbm_solver.cu:211 code=719(cudaErrorLaunchFailure) "
                "\"cudaDeviceSynchronize()\"\n"), False
    if kind == "triton_assert":  # tl.device_assert in a MoE routing kernel
        lines = "".join(f"/home/u/kernels/moe_align.py:88: unknown: block: [{b},0,0], thread: "
                        f"[{t},0,0] Assertion `expert id out of range` failed.\n"
                        for b, t in [(12, 37), (12, 38), (40, 5)])
        frames = _user_frames(rng)[:2] + [
            ("/home/u/kernels/moe_align.py", "moe_align_block_size",
             "_align_kernel[grid](topk_ids, sorted_ids, expert_ids, num_experts)")]
        return lines + _tb(rng, frames, "RuntimeError: Triton Error [CUDA]: device-side assert "
                           "triggered"), True
    if kind == "gather_assert":  # torch.gather with an index past the dimension
        f = "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:367"
        lines = "".join(f"{f}: operator(): block: [{b},0,0], thread: [{t},0,0] Assertion "
                        "`idx_dim >= 0 && idx_dim < index_size && \"index gather out of bounds\"` "
                        "failed.\n" for b, t in [(3, 96), (3, 97), (3, 98)])
        frames = _user_frames(rng) + [("/home/u/rl/ppo.py", "logprobs_of",
                                       "return torch.gather(logp, 2, actions.unsqueeze(-1))")]
        return lines + _tb(rng, frames, "RuntimeError: CUDA error: device-side assert triggered\n"
                           f"{ASYNC}\n{DSA}"), True
    raise ValueError(kind)


# ---------------------------------------------------------------- kernel + job

def storage(rng: random.Random, p: dict) -> tuple[str | None, str]:
    kind = p["kind"]
    if kind == "lustre":  # the client is evicted by an OST; reads in flight fail with EIO
        ost, osc = f"scratch-OST00{rng.randrange(10, 40)}", f"ffff{rng.randrange(16**8):08x}"
        nid = f"10.10.0.{rng.randrange(10, 99)}@o2ib"
        kern = (f"{_kstamp(rng)} LustreError: 11-0: {ost}-osc-{osc}: operation ost_read to node "
                f"{nid} failed: rc = -107\n"
                f"{_kstamp(rng)} Lustre: {ost}-osc-{osc}: Connection to {ost} (at {nid}) was lost; "
                "in progress operations using this service will wait for recovery to complete\n"
                f"{_kstamp(rng)} LustreError: 167-0: {ost}-osc-{osc}: This client was evicted by "
                f"{ost}; in progress operations using this service will fail.\n")
        frames = _user_frames(rng)[:2] + [
            ("/home/u/vision/data.py", "__getitem__", "with open(self.paths[i], \"rb\") as f: "
             "buf = f.read()")]
        job = (_pre(rng, "vit", rng.randrange(3, 6))
               + _tb(rng, frames, "OSError: [Errno 5] Input/output error"))
        return kern, job
    if kind == "gpfs":  # h5py's read of a GPFS file fails with EIO (no kernel log on this node)
        frames = _user_frames(rng)[:2] + [
            ("/home/u/climate/dataset.py", "__getitem__", "x = self.h5[\"t2m\"][i]"),
            (f"{SITE}/h5py/_hl/dataset.py", "__getitem__", "self.id.read(mspace, fspace, arr, "
             "mtype, dxpl=self._dxpl)"),
            ("h5py/h5d.pyx", "h5py.h5d.DatasetID.read", "")]
        job = (_pre(rng, "era5-unet", rng.randrange(3, 6))
               + _tb(rng, frames, "OSError: Can't synchronously read data (file read failed: time "
                     "= Mon Nov 30 10:41:07 2026\n, filename = '/gpfs/proj/climate/era5/t2m_2019"
                     ".h5', file descriptor = 7, errno = 5, error message = 'Input/output error', "
                     "buf = 0x7f3c1c000000, total read size = 4194304, bytes this sub-read = "
                     "4194304, bytes actually read = 18446744073709551615, offset = 88080384)"))
        return None, job
    raise ValueError(kind)


def hw(rng: random.Random, p: dict) -> tuple[str | None, str]:
    kind, bus = p["kind"], _bus(rng)
    pid = rng.randrange(10000, 99999)
    ecc = _tb(rng, _user_frames(rng), f"RuntimeError: CUDA error: uncorrectable ECC error "
              f"encountered\n{ASYNC}\n{DSA}")
    if kind == "xid64":  # row remapping could not record the failing row
        kern = (f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 63, pid={pid}, name=python, Row Remapper: "
                "New row (0x000000000a9c1f2b) Marked for Remap\n"
                f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 64, pid={pid}, name=python, Row Remapper "
                "Error: (0x000000000a9c1f2b) - All reserved rows for bank are remapped\n")
        return kern, ecc
    if kind == "xid94":  # a contained uncorrectable ECC error: the process is killed, GPU stays
        kern = (f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 94, pid={pid}, name=python, Contained: "
                "SM (0x1). RST: No, D-RST: No\n")
        return kern, ecc
    if kind == "smi_lost":  # the GPU stops answering: the job's own health check says so
        kern = (f"{_kstamp(rng)} NVRM: GPU at PCI:{bus}: GPU-{rng.randrange(16**8):08x}-"
                f"{rng.randrange(16**4):04x}-{rng.randrange(16**4):04x}\n"
                f"{_kstamp(rng)} NVRM: GPU {bus}.0: GPU has fallen off the bus.\n"
                f"{_kstamp(rng)} NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU "
                "has fallen off the bus.\n")
        job = ("step 4200: pre-eval GPU health check\n"
               f"Unable to determine the device handle for GPU{bus}.0: Unknown Error\n"
               "health check failed (nvidia-smi exit 255), aborting the run\n")
        return kern, job
    raise ValueError(kind)


def ct(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind in CATALOGUE["ct"]:  # the message texts: catalogue/holdout8.yaml
        return render(CATALOGUE["ct"][kind], {**globals(), **locals()})
    if kind == "horovod":  # Horovod's stall inspector, then its shutdown after the stall
        mm, ss, us = rng.randrange(10, 59), rng.randrange(10, 59), rng.randrange(100000, 999999)
        st = f"[2026-11-30 10:{mm}:{ss}.{us}"
        return (_pre(rng, "hvd-resnet", 4)
                + f"{st}: W /tmp/pip-install/horovod/common/stall_inspector.cc:107] One or "
                "more tensors were submitted to be reduced, gathered or broadcasted by subset "
                "of ranks "
                "and are waiting for remainder of ranks for more than 60 seconds. This may "
                "indicate that different ranks are trying to submit different tensors or that "
                "only subset of ranks is submitting tensors, which will cause deadlock. \n"
                "Missing ranks:\n5: [DistributedAdam_Allreduce.grad_conv1_0, "
                "DistributedAdam_Allreduce.grad_fc_0]\n"
                f"{st}: E /tmp/pip-install/horovod/common/stall_inspector.cc:142] Stalled for "
                "more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=600; shutting down Horovod.\n"
                + _tb(rng, _user_frames(rng)[:2] + [
                    (f"{SITE}/horovod/torch/mpi_ops.py", "synchronize",
                     "mpi_lib.horovod_torch_wait_and_clear(handle)")],
                      "horovod.common.exceptions.HorovodInternalError: Horovod has been shut "
                      "down. This was caused by an exception on one of the ranks or an "
                      "attempt to allreduce, allgather or broadcast a tensor after one of the "
                      "ranks finished execution."))
    raise ValueError(kind)


# ---------------------------------------------------------------- multi-rank

def assert_srun(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    tasks = []
    for r in range(n):
        pre = _pre(rng, "mt5-ft", rng.randrange(3, 6), dist=True, rank=r)
        if r == bad:
            f = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289"
            body = "".join(f"{f}: indexSelectLargeIndex: block: [{b},0,0], thread: [{t},0,0] "
                           "Assertion `srcIndex < srcSelectDimSize` failed.\n"
                           for b, t in [(211, 64), (211, 65), (377, 0)])
            body += _tb(rng, _user_frames(rng) + [(f"{SITE}/torch/nn/functional.py", "embedding",
                                                  "return torch.embedding(weight, input, "
                                                  "padding_idx, scale_grad_by_freq, sparse)")],
                        f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}")
            code, sig, t = 1, None, end
        else:
            body, code, sig, t = "", None, 9, end + rng.uniform(1, 3)
        _write(d, f"0.{r}.log", pre + body, tr, cid)
        tasks.append(_task(root, d, f"0.{r}.log", r, code, sig, round(t, 3), node=f"n{r + 1}",
                           step="0"))
    batch = (f"srun: error: n{bad + 1}: task {bad}: Exited with exit code 1\n"
             f"srun: Terminating StepId={jid}.0\n"
             f"slurmstepd: error: *** STEP {jid}.0 ON n1 CANCELLED AT 2026-11-30T10:12:4"
             f"{rng.randrange(0, 9)} ***\n"
             + "".join(f"srun: error: n{r + 1}: task {r}: Killed\n" for r in range(n) if r != bad))
    _write(d, "batch.0.log", batch, tr, cid)
    tasks.insert(0, _task(root, d, "batch.0.log", 0, 1, None, round(end + 4, 3), node="n1",
                          step="batch"))
    return tasks, bad, "FAILED"


def nccl_multi(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    tasks = []
    frames = _user_frames(rng)[:2] + [(f"{SITE}/torch/distributed/distributed_c10d.py",
                                       "all_reduce", "work = group.allreduce([tensor], opts)")]
    for r in range(n):
        pre = _pre(rng, "gpt-pt", rng.randrange(3, 6), dist=True, rank=r)
        host = f"gpu-n{30 + r}"
        if r == bad:
            peer = f"gpu-n{30 + (r + 1) % n}"
            body = (f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{r}] misc/"
                    f"socket.cc:538 NCCL WARN socketStartConnect: Connect to {peer}<"
                    f"{rng.randrange(30000, 60000)}> failed : Software caused connection abort\n"
                    f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{r}] "
                    "NCCL INFO misc/socket.cc:570 -> 6\n"
                    + _tb(rng, frames, "torch.distributed.DistBackendError: NCCL error in: "
                          "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
                          "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
                          "version 2.21.5\nncclSystemError: System call (e.g. socket, malloc) or "
                          "external library call failed or device error. \nLast error:\n"
                          f"socketStartConnect: Connect to {peer}<{rng.randrange(30000, 60000)}> "
                          "failed : Software caused connection abort"))
            t = end
        else:
            body = _tb(rng, frames, "torch.distributed.DistBackendError: NCCL communicator was "
                       "aborted on rank " + str(r) + ".")
            t = end + 5 + r
        _write(d, f"0.{r}.log", pre + body, tr, cid)
        tasks.append(_task(root, d, f"0.{r}.log", r, 1, None, round(t, 3), node=f"n{r + 1}",
                           step="0"))
    return tasks, bad, "FAILED"


def node_lost(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    style = p["style"]
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    if style == "hydra":  # MPICH's Hydra: the proxy on cn104 vanishes with its node
        text = ("".join(f"[0] iter {i * 100:5d}  residual {10 ** -(i / 2):.3e}\n"
                        for i in range(8))
                + "Connection to cn104 closed by remote host.\n"
                "[mpiexec@cn101] control_cb (mpiexec/pmiserv_cb.c:206): assert (!closed) failed\n"
                "[mpiexec@cn101] HYDT_dmxu_poll_wait_for_event (lib/tools/demux/demux_poll.c:76): "
                "callback returned error status\n"
                "[mpiexec@cn101] HYD_pmci_wait_for_completion (mpiexec/pmiserv_pmci.c:173): error "
                "waiting for event\n"
                "[mpiexec@cn101] main (mpiexec/mpiexec.c:261): process manager error waiting for "
                "completion\n"
                "srun: error: Node failure on cn104\n")
        _write(d, "run.0.log", text, tr, cid)
        return [_task(root, d, "run.0.log", 0, 255, None, end)], None, "NODE_FAIL"
    if style == "dask":  # a Dask scheduler in the batch step; its workers run under srun
        text = ("distributed.scheduler - INFO - Receive client connection: Client-"
                f"{rng.randrange(16**8):08x}\n"
                + "".join(f"featurize: {i * 25}% of 4096 partitions done\n" for i in range(3))
                + "srun: error: Node failure on gpu-n14\n"
                "distributed.scheduler - WARNING - Worker failed to heartbeat for 301s; attempting "
                "restart: <WorkerState 'tcp://10.1.0.14:40213', name: 3, status: running, memory: "
                "14, processing: 8>\n"
                "distributed.scheduler - INFO - Remove worker addr: tcp://10.1.0.14:40213 name: 3 "
                "(stimulus_id='worker-heartbeat-missing')\n"
                "distributed.scheduler - INFO - Lost all workers\n"
                f"slurmstepd: error: *** JOB {jid} ON gpu-n11 CANCELLED AT 2026-11-30T10:22:41 DUE "
                "TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n")
        _write(d, "batch.0.log", text, tr, cid)
        return [_task(root, d, "batch.0.log", 0, None, 9, end, node="gpu-n11", step="batch")], \
            None, "NODE_FAIL"
    if style == "srun3":
        n, lost = 3, 1
        stamp = (f"2026-11-30T0{rng.randrange(0, 9)}:{rng.randrange(10, 59)}:"
                 f"{rng.randrange(10, 59)}")
        batch = ("srun: error: Node failure on n2\n"
                 "srun: error: Nodes n2 are still not responding\n"
                 f"slurmstepd: error: *** STEP {jid}.0 ON n1 CANCELLED AT {stamp} DUE TO NODE "
                 "FAILURE ***\n"
                 + "".join(f"srun: error: n{r + 1}: task {r}: Killed\n" for r in range(n)
                           if r != lost))
        _write(d, "batch.0.log", batch, tr, cid)
        tasks = [_task(root, d, "batch.0.log", 0, None, 9, round(end + 30, 3), node="n1",
                       step="batch")]
        for r in range(n):
            text = "".join(f"[r{r}] epoch 2 batch {i * 50} loss {1.9 - i * 0.04:.3f}\n"
                           for i in range(6))
            _write(d, f"0.{r}.log", text, tr, cid)
            if r == lost:
                tasks.append({"log": str((d / f"0.{r}.log").relative_to(root)), "rank": r,
                              "node": None, "step": "0", "exit_code": None, "signal": None,
                              "core_dumped": False, "end_time": None})
            else:
                tasks.append(_task(root, d, f"0.{r}.log", r, None, 9, round(end + 2 + r, 3),
                                   node=f"n{r + 1}", step="0"))
        return tasks, lost, "NODE_FAIL"
    raise ValueError(style)


# ---------------------------------------------------------------- build

def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `h8_*` case into `d`; return its label (the DeepSpeed launcher exits 250
    after a child's SIGABRT)."""
    return compose(root, d, c, single={"h8_single": single,
                                       "h8_ct": lambda r, p: (ct(r, p), False)},
                   logged={"h8_hw": after_preamble(hw), "h8_storage": storage},
                   multi={"h8_assert_srun": assert_srun, "h8_nccl_multi": nccl_multi,
                          "h8_node": node_lost}, codes={"deepspeed": (250, None)})
