"""Held-out set 4's composed cases (templates `s4_*`): GPU failures and a node loss, which no
machine that builds the corpus can cause. Each message follows a documented format (the sources
are in corpus/holdout4/README.md); the surroundings reuse kit.py's preamble and traceback
helpers and vary with the case id. A case's `how` names the template and its parameters.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import (
    ASYNC,
    DSA,
    SITE,
    T0,
    _lost_task,
    _node_failure,
    _one_task,
    _pre,
    _rank_task,
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

ERR_DOC = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"


def _gib(rng: random.Random, lo: float, hi: float) -> str:
    return f"{rng.uniform(lo, hi):.2f} GiB"


def cuda_oom(rng: random.Random, p: dict) -> str:
    style = p["style"]
    if style == "processes":  # torch >= 2.1, several processes sharing the GPU
        pids = [rng.randrange(2000, 99999) for _ in range(2)]
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 "
               f"has a total capacity of 39.38 GiB of which {rng.uniform(50, 900):.2f} MiB is "
               f"free. Process {pids[0]} has 21.04 GiB memory in use. Process {pids[1]} has "
               f"17.{rng.randrange(10, 99)} GiB memory in use. Of the allocated memory "
               f"{_gib(rng, 15, 19)} is allocated by PyTorch, and {_gib(rng, 0.2, 1.5)} is "
               "reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
               "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
               "fragmentation.  See documentation for Memory Management  "
               "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        frames = _user_frames(rng)[:2] + [
            (f"{SITE}/torch/_tensor.py", "backward", "torch.autograd.backward("),
            (f"{SITE}/torch/autograd/graph.py", "_engine_run_backward",
             "return Variable._execution_engine.run_backward(")]
        return _tb(rng, frames, msg)
    if style == "cuda_name":  # torch 1.13-2.0 name and wording
        msg = (f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB "
               f"(GPU 0; 23.69 GiB total capacity; {_gib(rng, 20, 22)} already allocated; "
               f"{rng.uniform(100, 600):.2f} MiB free; 22.71 GiB reserved in total by PyTorch) If "
               "reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
               "fragmentation.  See documentation for Memory Management and "
               "PYTORCH_CUDA_ALLOC_CONF")
        frames = _user_frames(rng) + [
            (f"{SITE}/transformers/models/llama/modeling_llama.py", "forward",
             "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))")]
        return _tb(rng, frames, msg)
    if style == "xla_old":  # older JAX/XLA wording, then the BufferAssignment stats
        n = rng.randrange(2 * 10**9, 9 * 10**9)
        frames = [("/home/u/af2/run.py", "<module>", "out = model_runner.predict(feat)"),
                  ("/home/u/af2/model.py", "predict", "result = self.apply(params, key, f)")]
        return _tb(rng, frames,
                   f"RuntimeError: Resource exhausted: Out of memory while trying to allocate "
                   f"{n} bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n"
                   f"             parameter allocation:  {rng.uniform(100, 900):.2f}MiB\n"
                   f"              constant allocation:   {rng.uniform(1, 90):.2f}KiB\n"
                   f"        maybe_live_out allocation:  {rng.uniform(100, 900):.2f}MiB\n"
                   f"     preallocated temp allocation:   {n / 2**30:.2f}GiB\n"
                   f"                 total allocation:   {n / 2**30 + 1:.2f}GiB")
    if style == "zero3":  # a DeepSpeed ZeRO-3 gather running the GPU out of memory
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU "
               f"{rng.randrange(8)} has a total capacity of 79.33 GiB of which 2.61 GiB is free. "
               f"Including non-PyTorch memory, this process has 76.70 GiB memory in use. Of the "
               f"allocated memory {_gib(rng, 60, 70)} is allocated by PyTorch, and "
               f"{_gib(rng, 2, 6)} is reserved by PyTorch but unallocated. If reserved but "
               "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
               "expandable_segments:True to avoid fragmentation.  See documentation for Memory "
               "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-"
               "variables)")
        frames = _user_frames(rng)[:2] + [
            (f"{SITE}/deepspeed/runtime/zero/parameter_offload.py", "_pre_forward_module_hook",
             "self.pre_sub_module_forward_function(module)"),
            (f"{SITE}/deepspeed/runtime/zero/partition_parameters.py", "_all_gather_params",
             "flat_tensor = torch.empty(partition_sz * world_size,")]
        return ("[2026-02-03 11:02:41,377] [INFO] [config.py:1003:print]   zero_optimization "
                "stage ............ 3\n" + _tb(rng, frames, msg))
    raise ValueError(style)


def cuda_error(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind in CATALOGUE["cuda_error"]:  # the message texts: catalogue/holdout4.yaml
        return render(CATALOGUE["cuda_error"][kind], {**globals(), **locals()})
    if kind == "cuda_c":  # a CUDA C program's checkCudaErrors helper (cuda-samples style)
        lines = [f"stencil3d: grid {rng.choice([256, 512])}^3, {rng.randrange(50, 400)} steps"]
        lines += [f"step {s * 10:4d}  residual {10.0 ** -(s / 3):.3e}" for s in range(5)]
        lines.append("CUDA error at stencil.cu:211 code=700(cudaErrorIllegalAddress) "
                     "\"cudaDeviceSynchronize()\" ")
        return "\n".join(lines) + "\n"
    raise ValueError(kind)


def device_assert(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    table = {
        "bce": ("/pytorch/aten/src/ATen/native/cuda/Loss.cu", "operator()",
                "input_val >= zero && input_val <= one"),
        "nll2d": ("/pytorch/aten/src/ATen/native/cuda/NLLLoss2d.cu",
                  "nll_loss2d_forward_kernel", "cur_target >= 0 && cur_target < n_classes"),
        "index_accel": ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu", "operator()",
                        "-sizes[i] <= index && index < sizes[i] && \"index out of bounds\""),
        "gather": ("/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu", "operator()",
                   "idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\""),
    }
    f, fn, cond = table[kind]
    out = [f"{f}:{rng.randrange(90, 400)}: {fn}: block: [{rng.randrange(0, 900)},0,0], thread: "
           f"[{t * 32 + rng.randrange(32)},0,0] Assertion `{cond}` failed."
           for t in range(rng.randrange(3, 9))]
    if kind == "index_accel":
        msg = ("torch.AcceleratorError: CUDA error: device-side assert triggered\nSearch for "
               f"`cudaErrorAssert' in {ERR_DOC} for more information.\n{ASYNC}\n{DSA}")
    else:
        msg = f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}"
    return "\n".join(out) + "\n" + _tb(rng, _user_frames(rng), msg)


cuda_setup = catalogued(CATALOGUE["cuda_setup"], globals())


def _nccl_exc(rng: random.Random, kind: str, host: str, pid: int, rank: int) -> tuple[str, str]:
    """(the WARN line NCCL printed, the exception text torch raised from it)."""
    ver = rng.choice(["2.19.3", "2.20.5", "2.21.5"])
    warn, result = {
        "invalid_usage": (f"{host}:{pid}:{pid + 31} [{rank}] init.cc:1811 NCCL WARN Duplicate "
                          f"GPU detected : rank {rank} and rank {rank - 1 if rank else 1} both "
                          "on CUDA device 1b000",
                          ("invalid usage (run with NCCL_DEBUG=WARN for details)",
                           "ncclInvalidUsage: This usually reflects invalid usage of NCCL "
                           "library.")),
        "internal": (f"{host}:{pid}:{pid + 5} [{rank}] bootstrap.cc:77 NCCL WARN Bootstrap : no "
                     "socket interface found",
                     ("internal error - please report this issue to the NCCL developers",
                      "ncclInternalError: Internal check failed.")),
        "peer_closed": (f"{host}:{pid}:{pid + 12} [{rank}] misc/socket.cc:49 NCCL WARN "
                        f"socketProgress: Connection closed by remote peer 10.3.{rank}.17<3"
                        f"{rng.randrange(1000, 9999)}>",
                        ("remote process exited or there was a network error",
                         "ncclRemoteError: A call failed possibly due to a network error or a "
                         "remote process exiting prematurely.")),
    }[kind]
    exc = (f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
           f"ProcessGroupNCCL.cpp:{rng.randrange(1700, 3100)}, {result[0]}, NCCL version {ver}\n"
           f"{result[1]}\nLast error:\n{warn.split('NCCL WARN ')[1]}")
    return "\n" + warn, exc


def nccl(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    host = rng.choice(["dgx-a07", "hgx-h100-12", "gpu-r3-n9"])
    n, bad = p.get("ranks", 1), p.get("root", 0)
    end = T0 + rng.randrange(0, 10**6)
    tasks = []
    for r in range(n):
        pid = rng.randrange(1000, 99999)
        pre = _pre(rng, "llm-sft", rng.randrange(2, 5), dist=True, rank=r)
        if r == bad:
            warn, exc = _nccl_exc(rng, p["kind"], host, pid, r)
            frames = _user_frames(rng)[:2] + [
                (f"{SITE}/torch/distributed/distributed_c10d.py", p.get("op", "all_reduce"),
                 "work = group.allreduce([tensor], opts)")]
            body, code, sig, t = warn + "\n" + _tb(rng, frames, exc), 1, None, end
        else:  # the others learn of it when their communicator is aborted
            body = _tb(rng, _user_frames(rng)[:2] + [
                (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce",
                 "work = group.allreduce([tensor], opts)")],
                f"torch.distributed.DistBackendError: NCCL communicator was aborted on rank {r}."
                "  Original reason for failure was: NCCL error: remote process exited or there "
                "was a network error")
            code, sig, t = 1, None, end + rng.uniform(5, 90)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, code, sig, t, f"n{r // 4 + 1}",
                                alone=n == 1))
    return tasks, (bad if n > 1 else None)


def watchdog_old(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """torch <= 2.1 watchdog lines on every rank but the stuck one (which the launcher stops)."""
    n, bad = p["ranks"], p["root"]
    end = T0 + rng.randrange(0, 10**6)
    tasks = []
    for r in range(n):
        pre = _pre(rng, "vit-l", rng.randrange(3, 6), dist=True, rank=r)
        if r == bad:
            body, code, sig, t = "", None, 15, end + 40
        else:
            seq = rng.randrange(2000, 60000)
            body = (f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation "
                    f"timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, Timeout(ms)=1800000) ran "
                    f"for {1800000 + rng.randrange(5, 900)} milliseconds before timing out.\n"
                    "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. "
                    "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
                    "might run on corrupted/incomplete data.\n[E ProcessGroupNCCL.cpp:495] To "
                    "avoid data inconsistency, we are taking the entire process down.\n"
                    "terminate called after throwing an instance of 'std::runtime_error'\n"
                    f"  what():  [Rank {r}] Watchdog caught collective operation timeout: "
                    f"WorkNCCL(SeqNum={seq}, OpType=BROADCAST, Timeout(ms)=1800000) ran for "
                    "1800213 milliseconds before timing out.\n")
            code, sig, t = None, 6, end + rng.uniform(0, 5)
        tasks.append(_rank_task(root, d, r, pre + body, tr, cid, code, sig, t, f"n{r // 2 + 1}"))
    return tasks, bad


def xid(rng: random.Random, p: dict) -> tuple[str, str]:
    """(kernel lines, what the job printed)."""
    bus = f"{rng.randrange(0x10, 0xe0):02x}"
    stamp = f"[{rng.uniform(1e5, 9e5):.6f}]"
    pid = rng.randrange(1000, 99999)
    num = p["xid"]
    if num == 62:
        kern = (f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 62, pid={pid}, name=python3, "
                "Internal micro-controller halt (non-MCU) 0000(0000) 00000000 00000000\n")
        job = "RuntimeError: CUDA error: unspecified launch failure"
    elif num == 64:
        kern = (f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 64, pid={pid}, name=python3, Row "
                "Remapper: Failed to remap row. Bank 3 Row 0x1a2f.\n")
        job = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    elif num == 92:
        kern = (f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 92, pid={pid}, name=python3, High "
                "single-bit ECC error rate\n"
                f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 48, pid={pid}, name=python3, An "
                "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
                "at partition 2, subpartition 1.\n")
        job = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    elif num == 79:  # nvidia-smi's view of a GPU that is gone
        kern = (f"{stamp} NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n")
        job = ("RuntimeError: CUDA error: unspecified launch failure\n+ nvidia-smi\nUnable to "
               f"determine the device handle for GPU0000:{bus}:00.0: Unknown Error")
    else:
        raise ValueError(num)
    return kern, job


def node_fail(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    style = p["style"]
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    if style == "srun_steps":  # 2 nodes x 2 ranks; n2 is lost: its ranks leave no exit record
        tasks = []
        stamp = f"2026-03-0{rng.randrange(1, 9)}T1{rng.randrange(0, 9)}:2{rng.randrange(0, 9)}:07"
        batch = ("launching 4 ranks on n[1-2]\n" + _node_failure("n2", f"STEP {jid}.0", stamp)
                 + "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n")
        _write(d, "batch.0.log", batch, tr, cid)
        tasks.append(_task(root, d, "batch.0.log", 0, None, 9, round(end + 40, 3), node="n1",
                           step="batch"))
        for r in range(4):
            text = "".join(f"rank {r} step {s} loss {3 - s * 0.2:.3f}\n" for s in range(6))
            _write(d, f"0.{r}.log", text, tr, cid)
            if r < 2:
                tasks.append(_task(root, d, f"0.{r}.log", r, None, 15, round(end + 5, 3),
                                   node="n1", step="0"))
            else:  # no exit record: the node died with them
                tasks.append(_lost_task(root, d, f"0.{r}.log", r))
        return tasks, 2, "NODE_FAIL"
    if style == "submitit":
        text = (_pre(rng, "sweep-driver", 3) + f"submitted job {jid}, waiting for its result\n"
                + _tb(rng, [("/home/u/sweep/launch.py", "<module>", "res = job.result()"),
                            (f"{SITE}/submitit/core/core.py", "result",
                             "r = self.results()"),
                            (f"{SITE}/submitit/core/core.py", "results",
                             "outcome, result = self._get_outcome_and_result()"),
                            (f"{SITE}/submitit/core/core.py", "_get_outcome_and_result",
                             "raise utils.UncompletedJobError(\"\\n\".join(message))")],
                      f"submitit.core.utils.UncompletedJobError: Job {jid} (task: 0) with path "
                      f"/home/u/sweep/logs/{jid}_0_result.pkl\nhas not produced any output "
                      f"(state: NODE_FAIL)\nNo error stream produced. Look at stdout: "
                      f"/home/u/sweep/logs/{jid}_0_log.out"))
        return _one_task(root, d, text, tr, cid, end), None, None
    if style == "ray_old":
        text = (_pre(rng, "ray-tune", 4) + f"(raylet) [2026-01-1{rng.randrange(0, 9)} "
                f"0{rng.randrange(0, 9)}:33:1{rng.randrange(0, 9)},108 E "
                f"{rng.randrange(100, 999)} {rng.randrange(100, 999)}] gcs_rpc_client.h:"
                f"{rng.randrange(100, 600)}: Failed to connect to GCS within 60 seconds\n"
                f"2026-01-1{rng.randrange(0, 9)} 0{rng.randrange(0, 9)}:34:02,551\tWARNING "
                f"worker.py:{rng.randrange(1000, 2500)} -- The node with node id: "
                f"{rng.randrange(1 << 60):x}{rng.randrange(1 << 60):x} and ip: 10.4.1."
                f"{rng.randrange(2, 250)} has been marked dead because the detector has missed "
                "too many heartbeats from it. This can happen when a raylet crashes unexpectedly "
                "or has lagging heartbeats.\n")
        return _one_task(root, d, text, tr, cid, end), None, None
    raise ValueError(style)


def devmm(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind == "numpy":
        msg = ("TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to "
               "copy the tensor to host memory first.")
        frames = _user_frames(rng)[:2] + [("/home/u/proj/metrics.py", "auroc",
                                           "return roc_auc_score(y.numpy(), p.numpy())")]
    else:  # optimizer state restored on the CPU, parameters on the GPU
        msg = ("RuntimeError: Expected all tensors to be on the same device, but found at least "
               "two devices, cuda:0 and cpu!")
        frames = _user_frames(rng)[:2] + [
            (f"{SITE}/torch/optim/optimizer.py", "wrapper", "out = func(*args, **kwargs)"),
            (f"{SITE}/torch/optim/adam.py", "_multi_tensor_adam",
             "torch._foreach_lerp_(device_exp_avgs, device_grads, 1 - beta1)")]
    return _tb(rng, frames, msg)


def xid_log(rng: random.Random, p: dict) -> tuple[str | None, str]:
    """(the kernel's lines, or None where the job's own wrapper printed dmesg after the failure;
    the job's log)."""
    kern, job = xid(rng, p)
    text = _pre(rng, "pretrain", rng.randrange(3, 8)) + _tb(rng, _user_frames(rng), job)
    if p.get("where") == "log":
        return None, text + "+ dmesg | tail -n 3\n" + kern
    return kern, text


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `s4_*` case into `d`; return its label."""
    return compose(root, d, c, single={
        "s4_cuda_oom": cuda_oom, "s4_cuda_error": cuda_error, "s4_device_assert": device_assert,
        "s4_cuda_setup": cuda_setup, "s4_devmm": devmm}, logged={"s4_xid": xid_log},
        multi={"s4_nccl": nccl, "s4_watchdog_old": watchdog_old, "s4_node_fail": node_fail},
        plain=("cuda_c", "device_query"))
