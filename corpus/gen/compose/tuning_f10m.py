"""Composed tuning-corpus cases (templates `f10m_*`, ids `f10m-*-syn-*`) for issue 22's GPU-only
message families, which cannot be made on a CPU: a hardware Xid named as the cause of a later
channel Xid, the GSP firmware's heartbeat / RPC timeout without an Xid number, nvidia-smi unable
to reach a GPU, NVML errors raised through pynvml inside torch.cuda, torch's THC-era "cuda
runtime error (46)", NCCL's own lines (its error-return trace, its CUDA allocation failure after
a proxy lost its peer, a collective timeout said only by ProcessGroupNCCL / NCCL), and XLA's
BufferAssignment OOM listing with the first line of the message cut. Each message follows its
source's format (cited per kind); the surroundings reuse kit.py's helpers and vary with
the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import SITE, _tb, _user_frames, catalogue, compose, render

CATALOGUE = catalogue(__name__)


def _host(rng: random.Random) -> str:
    return rng.choice(["gpu-017", "a100-n03", "dgx-12", "hgx-b07"])


def _bus(rng: random.Random) -> str:
    return f"0000:{rng.choice(['1b', '3b', '5e', '86', 'ba', 'dc'])}:00"


def _steps(rng: random.Random, n: int) -> str:
    loss = rng.uniform(2.0, 4.0)
    out = []
    for i in range(n):
        loss *= rng.uniform(0.9, 0.99)
        out.append(f"step {(i + 1) * 50:6d} | loss {loss:.4f} | lr 3.0e-04")
    return "\n".join(out) + "\n"


def gpu(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    bus = _bus(rng)
    if kind in CATALOGUE["gpu"]:  # the message texts: catalogue/tuning_f10m.yaml
        return render(CATALOGUE["gpu"][kind], {**globals(), **locals()})
    if kind == "xid_caused_by":
        # NVIDIA's Xid catalogue: a channel Xid (45 preemptive cleanup, 13, 43) the driver ties
        # to an earlier hardware Xid ("caused by previous Xid N"); the batch script runs dmesg
        # after the job stalled
        hw = p.get("hw", rng.choice([74, 79, 94, 145, 149]))
        out = [_steps(rng, rng.randrange(3, 6)), "+ dmesg -T | grep NVRM | tail"]
        for ch in range(rng.randrange(2, 5)):
            out.append(f"[{rng.randrange(100, 900)}.{rng.randrange(100000, 999999)}] NVRM: Xid "
                       f"(PCI:{bus}): {p.get('xid', 45)}, pid={rng.randrange(10000, 99999)}, "
                       f"name=python3, Ch {ch + 1:08x} caused by previous Xid {hw}")
        return "\n".join(out) + "\n"
    if kind in ("nvml_driver", "nvml_unknown"):
        # pynvml (nvidia-ml-py) pynvml.py: _extractNVMLErrorsAsClasses makes NVMLError_<Name>
        # per NVML_ERROR_*; str() is nvmlErrorString's text; torch/cuda/__init__.py's
        # utilization / memory_usage call pynvml.nvmlInit() and nvmlDeviceGetHandleByIndex
        name, words = (("DriverNotLoaded", "Driver Not Loaded") if kind == "nvml_driver"
                       else ("Unknown", "Unknown Error"))
        frames = _user_frames(rng) + [
            (f"{SITE}/torch/cuda/__init__.py", "utilization",
             "handle = _get_pynvml_handler(device)"),
            (f"{SITE}/torch/cuda/__init__.py", "_get_pynvml_handler", "pynvml.nvmlInit()"),
            (f"{SITE}/pynvml.py", "nvmlInit", "nvmlInitWithFlags(0)"),
            (f"{SITE}/pynvml.py", "nvmlInitWithFlags", "_nvmlCheckReturn(ret)"),
            (f"{SITE}/pynvml.py", "_nvmlCheckReturn", "raise NVMLError(ret)")]
        return _tb(rng, frames, f"pynvml.NVMLError_{name}: {words}")
    if kind == "thc_busy":
        # torch 0.x/1.x THC: THCudaCheck FAIL file=... line=... error=46 : <cudaGetErrorString>,
        # then "cuda runtime error (46) : ..." (exclusive-process GPU held by another job)
        frames = _user_frames(rng)[:1] + [
            (f"{SITE}/torch/nn/modules/module.py", "cuda",
             "return self._apply(lambda t: t.cuda(device))"),
            (f"{SITE}/torch/_utils.py", "_cuda", "return new_type(self.size()).copy_(self, async)")]
        return ("THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=66 "
                "error=46 : all CUDA-capable devices are busy or unavailable\n"
                + _tb(rng, frames, "RuntimeError: cuda runtime error (46) : all CUDA-capable "
                      "devices are busy or unavailable at /pytorch/torch/lib/THC/generic/"
                      "THCStorage.cu:66"))
    if kind == "nccl_trace":
        # NCCL src/include/checks.h NCCLCHECK: INFO "%s:%d -> %d" at each level (2 =
        # ncclSystemError) - the WARN line itself lost from the excerpt
        h, pid = _host(rng), rng.randrange(1000, 99999)
        out = [f"{h}:{pid}:{pid + 5} [0] NCCL INFO Channel {c:02d}/0 : 0[0] -> 1[0] [send] via "
               f"NET/Socket/{c % 4}" for c in range(rng.randrange(4, 9))]
        out += [f"{h}:{pid}:{pid + 6} [0] NCCL INFO {f} -> 2" for f in
                ["include/net.h:25", "transport/net.cc:515", "transport.cc:97", "init.cc:1079"]]
        return "\n".join(out) + "\n"
    if kind == "nccl_calloc":
        # NCCL src/proxy.cc "Socket recv failed while polling for opId=%p" on the rank whose
        # proxy peer died; src/include/alloc.h CUDACHECK "Cuda failure '%s'" and "Failed to
        # CUDA calloc %ld bytes" on the rank that ran out of GPU memory
        h, pid = _host(rng), rng.randrange(1000, 99999)
        return (f"{h}:{pid}:{pid + 9} [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection "
                f"closed by remote peer {h}-ib<{rng.randrange(30000, 60000)}>\n"
                f"{h}:{pid}:{pid + 9} [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling "
                "for opId=0x55a51966cc80\n"
                + "".join(f"{h}:{pid}:{pid + 9} [0] NCCL INFO {f} -> 3\n" for f in
                          ["transport/p2p.cc:438", "transport.cc:33", "init.cc:1358"])
                + f"\n{h}:{pid + 3}:{pid + 12} [3] include/alloc.h:178 NCCL WARN Cuda failure "
                "'out of "
                "memory'\n\n"
                f"{h}:{pid + 3}:{pid + 12} [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc "
                f"{rng.choice([2097152, 6291456, 12582912])} bytes\n"
                f"{h}:{pid + 3}:{pid + 12} [3] NCCL INFO transport/p2p.cc:204 -> 1\n")
    if kind == "pg_timeout":
        # torch >= 2.2 ProcessGroupNCCL.cpp: the watchdog's own "Timeout at NCCL work: %ld,
        # last enqueued NCCL work: %ld, last completed NCCL work: %ld." before its abort (the
        # excerpt without the "Watchdog caught collective operation timeout" line)
        r = rng.randrange(0, 8)
        seq = rng.randrange(1000, 90000)
        return (_steps(rng, rng.randrange(3, 6))
                + f"[rank{r}]:[E ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
                f"Rank {r}] "
                f"Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed "
                f"NCCL work: {seq - 1}.\n"
                f"[rank{r}]:[E ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
                "Exception (either an error or timeout) detected by watchdog at work: "
                f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.\n")
    if kind == "xla_peak_cut":
        # XLA's BufferAssignment OOM debugging after RESOURCE_EXHAUSTED (the message's first
        # line lost from the excerpt): the peak-buffer listing, then the Python traceback cut
        out = ["\tPeak buffers:"]
        for b in range(1, rng.randrange(3, 5)):
            out += [f"\t\tBuffer {b}:", f"\t\t\tSize: {rng.uniform(0.5, 3):.2f}GiB",
                    "\t\t\tOperator: op_name=\"pmap(train_step)/jit(main)/transpose(jvp(Model))"
                    "/dot_general\"", "\t\t\tXLA Label: fusion",
                    f"\t\t\tShape: f32[{rng.choice([8, 16])},{rng.choice([256, 512])},3072]",
                    "\t\t\t=========================="]
        frames = [("/workspace/proj/main.py", "<module>", "app.run(main)"),
                  (f"{SITE}/absl/app.py", "run", "_run_main(main, args)")]
        tb = _tb(rng, frames, "")
        return "\n".join(out) + "\n\n" + tb.rstrip("\n").rsplit("\n", 1)[0] + "\n"
    raise ValueError(f"unknown f10m_gpu kind {kind!r}")


# logs that are the tool's or the library's own output from their first line
PLAIN = ("nccl_trace", "nccl_calloc", "xla_peak_cut", "thc_busy")


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f10m_*` case into `d`; return its label."""
    return compose(root, d, c, single={"f10m_gpu": gpu}, plain=PLAIN)
