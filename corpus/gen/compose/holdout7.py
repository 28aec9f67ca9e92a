"""Held-out set 7's composed cases (templates `h7_*`): the GPU failures (and a few storage and
node losses) no machine building the corpus can cause, as everyday PyTorch / Hugging Face / FSDP
jobs meet them. Each message follows the format of the source that prints it (PyTorch's CUDA
caching allocator, c10 CUDA error checks, ATen device-side asserts, ProcessGroupNCCL and its
watchdog, torchrun's elastic agent, srun/slurmstepd, NVRM Xid lines, Lustre/NFS client lines;
corpus/holdout7/README.md lists them); the surroundings reuse kit.py's helpers and vary
with the case id. A case's `how` names the template.
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
    catalogue,
    compose,
    render,
)

CATALOGUE = catalogue(__name__)

HF = f"{SITE}/transformers"
MOD = f"{SITE}/torch/nn/modules/module.py"


def _oom(rng: random.Random, dev: int, want: float, total: float = 79.15) -> str:
    free = rng.uniform(0.1, min(want, 2.0) - 0.05) if want > 0.2 else 0.05
    used = total - free - rng.uniform(0.3, 0.8)
    alloc = used - rng.uniform(0.5, 3)
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {want:.2f} GiB. GPU "
            f"{dev} has a total capacity of {total:.2f} GiB of which {free * 1024:.2f} MiB is "
            f"free. Including non-PyTorch memory, this process has {used:.2f} GiB memory in use. "
            f"Of the allocated memory {alloc:.2f} GiB is allocated by PyTorch, and "
            f"{used - alloc - 0.2:.2f} GiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
            "True to avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def _hf_frames() -> list[tuple[str, str, str]]:
    return [("/home/mk/sft/train_sft.py", "<module>", "trainer.train()"),
            (f"{HF}/trainer.py", "train", "return inner_training_loop("),
            (f"{HF}/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
            (f"{HF}/trainer.py", "training_step",
             "loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)"),
            (f"{HF}/trainer.py", "compute_loss", "outputs = model(**inputs)"),
            (MOD, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
            (MOD, "_call_impl", "return forward_call(*args, **kwargs)")]


def _hf_pre(rng: random.Random) -> str:
    n = rng.randrange(3, 7)
    out = ["***** Running training *****", f"  Num examples = {rng.randrange(20, 90) * 1000:,}",
           "  Num Epochs = 3", "  Instantaneous batch size per device = 8",
           "  Gradient Accumulation steps = 4", "  Total optimization steps = 4,686",
           "  Number of trainable parameters = 41,943,040"]
    loss = rng.uniform(1.6, 2.4)
    for i in range(n):
        loss *= rng.uniform(0.93, 0.99)
        out.append(f"{{'loss': {loss:.4f}, 'grad_norm': {rng.uniform(0.2, 1.5):.4f}, "
                   f"'learning_rate': {rng.uniform(1e-5, 2e-4):.3e}, "
                   f"'epoch': {0.01 * (i + 1):.2f}}}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- single-log failures

def single(rng: random.Random, p: dict) -> tuple[str, int | None, int | None]:
    """(log text, exit code, signal) of a one-process failure."""
    kind = p["kind"]
    dev = rng.randrange(8)
    if kind in CATALOGUE["single"]:  # the message texts: catalogue/holdout7.yaml
        return render(CATALOGUE["single"][kind], {**globals(), **locals()})
    if kind == "oom_generate":
        pre = ("Evaluating on 1319 prompts (max_new_tokens=1024, num_beams=4)\n"
               + "".join(f"eval batch {i}/83 done\n" for i in range(rng.randrange(4, 12))))
        frames = [("/home/ts/eval/run_eval.py", "<module>", "preds = generate_all(model, tok, "
                   "prompts)"), ("/home/ts/eval/run_eval.py", "generate_all",
                                 "out = model.generate(**batch, generation_config=gen_cfg)"),
                  (f"{SITE}/torch/utils/_contextlib.py", "decorate_context",
                   "return func(*args, **kwargs)"),
                  (f"{HF}/generation/utils.py", "generate", "result = self._beam_search("),
                  (f"{HF}/generation/utils.py", "_beam_search",
                   "model_outputs = self(**model_inputs, return_dict=True)")]
        return pre + _tb(rng, frames, _oom(rng, dev, rng.uniform(0.4, 1.2))), 1, None
    if kind == "assert_embedding":
        f = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1422"
        lines = "".join(
            f"{f}: indexSelectLargeIndex: block: [{b},0,0], thread: [{t},0,0] Assertion "
            "`srcIndex < srcSelectDimSize` failed.\n"
            for b, t in sorted((rng.randrange(0, 300), rng.randrange(0, 128)) for _ in range(5)))
        frames = _hf_frames() + [
            (f"{HF}/models/qwen2/modeling_qwen2.py", "forward",
             "inputs_embeds = self.embed_tokens(input_ids)"),
            (f"{SITE}/torch/nn/functional.py", "embedding",
             "return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)")]
        return (_hf_pre(rng) + lines + _tb(rng, frames, "RuntimeError: CUDA error: device-side "
                                           f"assert triggered\n{ASYNC}\n{DSA}\n")), 1, None
    if kind == "assert_ce":
        f = "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250"
        lines = "".join(f"{f}: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: "
                        f"[{t},0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
                        for t in sorted(rng.sample(range(32), 3)))
        frames = _user_frames(rng) + [
            (f"{SITE}/torch/nn/modules/loss.py", "forward",
             "return F.cross_entropy("),
            (f"{SITE}/torch/nn/functional.py", "cross_entropy",
             "return torch._C._nn.cross_entropy_loss(")]
        return (_pre(rng, "seg-ft", rng.randrange(2, 6)) + lines
                + _tb(rng, frames, "torch.AcceleratorError: CUDA error: device-side assert "
                      f"triggered\n{ASYNC}\n{DSA}\n")), 1, None
    raise ValueError(kind)


# ---------------------------------------------------------------- kernel + job

def hw(rng: random.Random, p: dict) -> tuple[str, str]:
    """(kernel lines, what the job printed)."""
    kind = p["kind"]
    bus = f"0000:{rng.choice(['17', '3d', '63', '9a', 'bd', 'e1'])}:00"
    st = f"[{rng.uniform(1e5, 9e5):.6f}]"
    pid = rng.randrange(1000, 99999)
    if kind == "xid79":
        kern = (f"{st} NVRM: GPU at PCI:{bus}: GPU-{rng.randrange(16**8):08x}-5d1c-9f3e-"
                f"{rng.randrange(16**4):04x}-{rng.randrange(16**12):012x}\n"
                f"{st} NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
                "off the bus.\n"
                f"{st} NVRM: GPU {bus}.0: GPU has fallen off the bus.\n")
        frames = _user_frames(rng)[:2] + [("/workspace/proj/engine.py", "train_one_epoch",
                                           "loss_meter.update(loss.item())")]
        return kern, _pre(rng, "train", 5) + _tb(
            rng, frames, "torch.AcceleratorError: CUDA error: unspecified launch failure\n"
            f"{ASYNC}\n{DSA}\n")
    if kind == "xid48":
        kern = (f"{st} NVRM: Xid (PCI:{bus}): 48, pid={pid}, name=python, An uncorrectable "
                "double bit error (DBE) has been detected on GPU in the framebuffer at partition "
                f"{rng.randrange(0, 8)}, subpartition {rng.randrange(0, 2)}.\n"
                f"{st} NVRM: Xid (PCI:{bus}): 63, pid={pid}, name=python, Row Remapper: New row "
                "marked for remapping, reset gpu to activate.\n")
        frames = _user_frames(rng)
        return kern, _pre(rng, "train", 6) + _tb(
            rng, frames, "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            f"{ASYNC}\n{DSA}\n")
    if kind == "xid94":
        kern = (f"{st} NVRM: Xid (PCI:{bus}): 94, pid={pid}, name=python3, Contained: SM (0x1). "
                "RST: No, D-RST: No\n")
        frames = _hf_frames()
        return kern, _hf_pre(rng) + _tb(
            rng, frames, "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            f"{ASYNC}\n{DSA}\n")
    if kind == "lustre_eio":
        kern = (f"{st} LustreError: 11-0: scratch-OST0017-osc-ffff9a2c4e1b8000: operation "
                "ost_read to node 10.20.0.47@o2ib failed: rc = -107\n"
                f"{st} Lustre: scratch-OST0017-osc-ffff9a2c4e1b8000: Connection to scratch-OST0017 "
                "(at 10.20.0.47@o2ib) was lost; in progress operations using this service will "
                "wait for recovery to complete\n"
                f"{st} LustreError: 167-0: scratch-OST0017-osc-ffff9a2c4e1b8000: This client "
                "was evicted by scratch-OST0017; in progress operations using this service "
                "will fail.\n")
        frames = [("/home/mk/pretrain/train.py", "<module>", "main()"),
                  ("/home/mk/pretrain/data.py", "__iter__", "chunk = np.fromfile(f, dtype=np."
                   "uint16, count=self.block)")]
        return kern, ("step 18200 | loss 2.4410 | 412k tok/s\n"
                      + _tb(rng, frames, "OSError: [Errno 5] Input/output error"))
    raise ValueError(kind)


# ---------------------------------------------------------------- multi-rank

def _ranked(text: str, rank: int) -> str:
    return "".join(f"[rank{rank}]:{ln}\n" for ln in text.splitlines())


def torchrun(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """torchrun with N local ranks in one log: rank `root` fails, the agent stops the rest."""
    n, bad, kind = p["ranks"], p["root"], p["kind"]
    pre = "".join(_pre(rng, "sft", rng.randrange(2, 4), dist=True, rank=r) for r in range(n))
    if kind == "oom":
        frames = _hf_frames() + [(f"{HF}/models/llama/modeling_llama.py", "forward",
                                  "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * "
                                  "self.up_proj(x))")]
        tb = _tb(rng, frames, _oom(rng, bad, rng.uniform(1.5, 4.0)))
    else:
        f = "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250"
        tb = "".join(f"{f}: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: "
                     f"[{t},0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
                     for t in sorted(rng.sample(range(64), 3)))
        tb += _tb(rng, _user_frames(rng) + [(f"{SITE}/torch/nn/functional.py", "cross_entropy",
                                             "return torch._C._nn.cross_entropy_loss(")],
                  f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC}\n{DSA}")
    pid0 = rng.randrange(2000, 60000)
    others = [r for r in range(n) if r != bad]
    stamp = f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}_1{rng.randrange(0, 9)}:" \
            f"{rng.randrange(10, 59)}:{rng.randrange(10, 59)}"
    summary = "".join(
        f"W1130 11:04:5{i}.2{i}1000 {pid0} torch/distributed/elastic/multiprocessing/api.py:908] "
        f"Sending process {pid0 + 10 + r} closing signal SIGTERM\n" for i, r in enumerate(others))
    summary += (f"E1130 11:04:59.318000 {pid0} torch/distributed/elastic/multiprocessing/api.py:"
                f"882] failed (exitcode: 1) local_rank: {bad} (pid: {pid0 + 10 + bad}) of binary: "
                "/opt/conda/envs/train/bin/python\n"
                "Traceback (most recent call last):\n"
                "  File \"/opt/conda/envs/train/bin/torchrun\", line 8, in <module>\n"
                "    sys.exit(main())\n"
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                + "=" * 56 + "\ntrain_sft.py FAILED\n" + "-" * 56
                + "\nFailures:\n  <NO_OTHER_FAILURES>\n" + "-" * 56
                + "\nRoot Cause (first observed failure):\n[0]:\n"
                f"  time      : {stamp}\n  host      : gpu-h100-{rng.randrange(10, 99)}\n"
                f"  rank      : {bad} (local_rank: {bad})\n  exitcode  : 1 (pid: "
                f"{pid0 + 10 + bad})\n  error_file: <N/A>\n  traceback : To enable traceback "
                "see: https://pytorch.org/docs/stable/elastic/errors.html\n" + "=" * 56 + "\n")
    _write(d, "run.0.log", pre + _ranked(tb, bad) + summary, tr, cid)
    end = T0 + rng.randrange(0, 10**6)
    return [_task(root, d, "run.0.log", 0, 1, None, end)], bad, None


def srun_job(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """A job under srun: one task log per rank (step 0) plus the batch log with srun's lines."""
    n, bad, kind = p["ranks"], p["root"], p["kind"]
    per = 2 if n == 4 else 1
    jid = rng.randrange(1000000, 9999999)
    end = T0 + rng.randrange(0, 10**6)
    when = f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}T1{rng.randrange(0, 9)}:" \
           f"{rng.randrange(10, 59)}:{rng.randrange(10, 59)}"
    tasks, state = [], "FAILED"
    node_of = {r: f"n{r // per + 1}" for r in range(n)}
    lost = {r for r in range(n) if node_of[r] == node_of[bad]} if kind.startswith("node_lost") \
        else set()
    batch = f"job {jid}: {n} ranks on {', '.join(sorted(set(node_of.values())))}\n"
    for r in range(n):
        body = _pre(rng, "pretrain", rng.randrange(3, 7), dist=True, rank=r)
        code, sig, t = None, 9, end + rng.uniform(1, 3)
        if kind == "nccl_ib" and r == bad:
            host = f"gpu-{node_of[r]}"
            body += (f"{host}:{rng.randrange(1000, 9999)}:{rng.randrange(1000, 9999)} [{r % 2}] "
                     "transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                     "10.12.4.9<51812> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=1 len=0 vendor "
                     "err 129 (Recv) localGid ::ffff:10.12.4.31 remoteGids::ffff:10.12.4.9 hca "
                     "mlx5_1\n")
            body += _tb(rng, _user_frames(rng)[:2] + [
                (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce",
                 "work = group.allreduce([tensor], opts)")],
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                "distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with "
                "NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: System call "
                "(e.g. socket, malloc) or external library call failed or device error. \nLast "
                "error:\nNET/IB : Got completion from peer 10.12.4.9<51812> with status=IBV_WC_"
                "RETRY_EXC_ERR(12) opcode=1 len=0 vendor err 129 (Recv)")
            code, sig, t = 1, None, end
        elif kind == "watchdog" and r != bad:
            seq = rng.randrange(20000, 90000)
            body += (f"[rank{r}]:[E1130 03:21:4{r}.118{r}00 {rng.randrange(1000, 9999)} torch/csrc/"
                     f"distributed/c10d/ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
                     f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
                     "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds "
                     "before timing out.\n"
                     f"[rank{r}]:[E1130 03:21:4{r}.120{r}00 {rng.randrange(1000, 9999)} torch/csrc/"
                     "distributed/c10d/ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) "
                     f"Rank {r}] Exception (either an error or timeout) detected by watchdog at "
                     "work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: "
                     f"{seq - 1}.\n".replace("{seq}", str(seq))
                     + f"[rank{r}]:[E1130 03:21:4{r}.121{r}00 {rng.randrange(1000, 9999)} "
                     "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1709] [PG ID 0 PG GUID "
                     "0(default_pg) "
                     f"Rank {r}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last "
                     f"completed NCCL work: {seq - 1}.\n"
                     "terminate called after throwing an instance of 'c10::DistBackendError'\n"
                     f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process group watchdog "
                     "thread terminated with exception: [Rank {r}] Watchdog caught collective "
                     f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, "
                     "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing "
                     "out.\n".replace("{r}", str(r)))
            code, sig, t = None, 6, end + r * 0.2
        elif kind == "watchdog":
            body += f"[rank {r}] saving full state dict to /nfs/ckpt/step_20000 (blocking)\n"
            t = end + 5
        if r in lost:
            _write(d, f"0.{r}.log", body, tr, cid)
            tasks.append({"log": str((d / f"0.{r}.log").relative_to(root)), "rank": r,
                          "node": None, "step": "0", "exit_code": None, "signal": None,
                          "core_dumped": False, "end_time": None})
            continue
        _write(d, f"0.{r}.log", body, tr, cid)
        tasks.append(_task(root, d, f"0.{r}.log", r, code, sig, round(t, 3), node=node_of[r],
                           step="0"))
    bnode = node_of[bad]
    if kind == "nccl_ib":
        batch += (f"srun: error: {bnode}: task {bad}: Exited with exit code 1\n"
                  f"srun: Terminating StepId={jid}.0\n"
                  f"slurmstepd: error: *** STEP {jid}.0 ON n1 CANCELLED AT {when} ***\n"
                  + "".join(f"srun: error: {node_of[r]}: task {r}: Killed\n"
                            for r in range(n) if r != bad))
    elif kind == "watchdog":
        batch += "".join(f"srun: error: {node_of[r]}: task {r}: Aborted (core dumped)\n"
                         for r in range(n) if r != bad)
        batch += (f"srun: Terminating StepId={jid}.0\n"
                  f"slurmstepd: error: *** STEP {jid}.0 ON n1 CANCELLED AT {when} ***\n"
                  f"srun: error: {bnode}: task {bad}: Killed\n")
    else:
        state = "NODE_FAIL"
        if kind != "node_lost_batch":
            batch += (f"srun: error: Node failure on {bnode}\n"
                      f"slurmstepd: error: *** JOB {jid} ON n1 CANCELLED AT {when} DUE TO NODE "
                      "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
                      + "".join(f"srun: error: {node_of[r]}: task {r}: Killed\n"
                                for r in range(n) if r not in lost))
    if kind == "node_lost_batch":  # the batch step itself ran on the lost node: its log stops
        tasks = []
        body = _pre(rng, "pretrain", rng.randrange(5, 9)) + "epoch 3: 41% 612/1490\n"
        _write(d, "batch.0.log", body, tr, cid)
        tasks.append({"log": str((d / "batch.0.log").relative_to(root)), "rank": 0,
                      "node": None, "step": "batch", "exit_code": None, "signal": None,
                      "core_dumped": False, "end_time": None})
        return tasks, bad, state
    _write(d, "batch.0.log", batch, tr, cid)
    code = 1 if state == "FAILED" else None
    tasks.insert(0, _task(root, d, "batch.0.log", 0, code, None if code else 9,
                          round(end + 6, 3), node="n1", step="batch"))
    return tasks, bad, state


# ---------------------------------------------------------------- build

def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `h7_*` case into `d`; return its label."""
    lab = compose(root, d, c, single={"h7_single": single}, logged={"h7_hw": hw},
                  multi={"h7_torchrun": torchrun, "h7_srun": srun_job})
    if lab["slurm_state"] == "NODE_FAIL" and c["params"].get("kind") == "node_lost_batch":
        lab["slurm_reason"] = "NodeDown"
    return lab
