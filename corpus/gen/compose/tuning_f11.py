"""Composed tuning-corpus cases (template `f11_log`, ids `f11-*-syn-*`) for issue 32's families:
kinds of logs that two real sets nobody here had seen missed. Each message follows the format of
the software that prints it (cited per kind in catalogue/tuning_f11.yaml); nothing is copied
from those sets. The families: Slurm's own end line after a long quiet or with the signal it
sent; TensorFlow / XLA's cuInit probe on a CPU-only node before the real failure; divergence
shown only in a trainer's summaries or progress postfix, or in fairseq's loss scaler; NCCL
errors behind multi-node launchers' prefixes and in NCCL's pre-2.4 format; Open MPI 1.x losing
a daemon; the GPU's hardware faults as nvidia-smi, the driver and DCGM word them in the job's
own output; storage errnos inside wrapper exceptions and the AWS SDK's curl failures; host
memory exhausted inside the program; a watchdog timeout whose teardown aborts; clouds'
preemption notices; a log that just stops (unknown); an arch mismatch ("invalid device
function"); a DataLoader wrapper whose worker traceback was cut; pyxis / enroot container
launch failures. The surroundings reuse kit.py's helpers and vary with the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import (
    SITE,
    _daemon_lost,
    _pre,
    _tb,
    _user_frames,
    catalogue,
    catalogued,
    compose,
)

CATALOGUE = catalogue(__name__)


def _host(rng: random.Random) -> str:
    return rng.choice(["gpu-017", "a100-n03", "dgx-12", "hgx-b07", "cn-211"])


def _timed(rng: random.Random, hour: int, n: int) -> str:
    """A logger's timed progress lines, one every 40-80 s from hour:00 on 2026-03-01."""
    t, loss, out = hour * 3600 + rng.randrange(0, 300), rng.uniform(2.0, 4.0), []
    for i in range(n):
        t += rng.randrange(40, 80)
        loss *= rng.uniform(0.97, 0.999)
        out.append(f"2026-03-01 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d},"
                   f"{rng.randrange(1000):03d} INFO trainer: step {(i + 1) * 20} loss {loss:.4f}")
    return "\n".join(out) + "\n"


def _prefixed(prefix: str, text: str) -> str:
    return "".join(prefix + ln + "\n" for ln in text.splitlines())


def _trainer_dicts(rng: random.Random, evals: int) -> str:
    """Hugging Face Trainer's log dicts (trainer.py `log`): loss lines, then eval_loss nan at
    every evaluation, the train summary with train_loss nan at the end."""
    out, ep = [], 0.0
    for e in range(evals):
        for _ in range(rng.randrange(1, 3)):
            ep += 0.25
            out.append(f"{{'loss': {0.0 if e else rng.uniform(1, 3):.4f}, 'grad_norm': "
                       f"{0.0 if e else rng.uniform(0.5, 4):.3f}, 'learning_rate': "
                       f"{rng.uniform(1e-5, 5e-5):.2e}, 'epoch': {ep}}}")
        out.append(f"{{'eval_loss': nan, 'eval_runtime': {rng.uniform(5, 60):.2f}, "
                   f"'eval_samples_per_second': {rng.uniform(20, 200):.1f}, "
                   f"'eval_steps_per_second': {rng.uniform(2, 20):.1f}, 'epoch': {ep}}}")
    out.append(f"{{'train_runtime': {rng.uniform(300, 9000):.1f}, 'train_samples_per_second': "
               f"{rng.uniform(5, 90):.2f}, 'train_steps_per_second': {rng.uniform(0.5, 9):.2f}, "
               f"'train_loss': nan, 'epoch': {ep}}}")
    return "\n".join(out) + "\n"


def _scale_collapse(rng: random.Random) -> str:
    scale, out = 2.0 ** rng.randrange(3, 7), []
    while scale > 1.5e-4:
        scale /= 2
        out.append(f"| WARNING: overflow detected, setting loss scale to: {scale}")
    return "\n".join(out) + "\n"


# draws of the catalogue's texts (a ":" cannot stand inside a catalogue field)
WRAPPERS = ["RuntimeError: failed to read shard index", "ValueError: cannot load dataset index",
            "datasets.builder.DatasetGenerationError: An error occurred while generating the "
            "dataset"]
HOOK_ERRORS = ["initialization error: nvml error: driver not loaded",
               "requirement error: unsatisfied condition: cuda>=12.4, please update your driver "
               "to a newer version, or use an earlier cuda container"]
REGISTRIES = ["registry.example.org", "gitlab.example.edu:5050", "ghcr.io"]
LAUNCH_ERRORS = ["Communication connection failure", "Socket timed out on send/recv operation"]
NCCL_SYS = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.19.3\nncclSystemError: System call (e.g. socket, malloc) or "
            "external library call failed or device error.\nLast error:\nsocketStartConnect: "
            "Connect to 10.1.4.7<43211> failed : Software caused connection abort")


def _code(rng: random.Random, p: dict) -> str:
    """The kinds whose text is built by code (prefixes on every line, loops, choices)."""
    kind = p["kind"]
    if kind == "pdsh_nccl":
        # an NCCL error raised in a Python traceback, behind pdsh's "host: " prefix
        frames = _user_frames(rng)[:2] + [(f"{SITE}/torch/distributed/c10d_logger.py",
                                           "wrapper", "return func(*args, **kwargs)")]
        return _prefixed(_host(rng) + ": ", _pre(rng, "train", 3) + _tb(rng, frames, NCCL_SYS))
    if kind == "ds_runner_nccl":
        # DeepSpeed's multi-node runner (runner.py's "cmd = pdsh ..."); pdsh prefixes each
        # worker's output with its address and reports "ssh exited with exit code N"
        ip = f"10.{rng.randrange(255)}.{rng.randrange(255)}.{rng.randrange(1, 254)}"
        frames = [("train.py", "<module>", "engine, opt, _, _ = deepspeed.initialize("
                   "args=args, model=model)"),
                  (f"{SITE}/deepspeed/comm/torch.py", "broadcast",
                   "return torch.distributed.broadcast(tensor=tensor, src=src, group=group)")]
        return (f"[2026-02-11 09:{rng.randrange(60):02d}:01,103] [INFO] [runner.py:568:main] "
                f"cmd = pdsh -S -f 1024 -w {ip},10.0.0.9 export PYTHONPATH=/home/u1/proj; cd "
                "/home/u1/proj; /usr/bin/python -u -m deepspeed.launcher.launch "
                f"--world_info=eyJ9 --node_rank=%n --master_addr={ip} --master_port=29500 "
                "train.py --deepspeed ds_config.json\n"
                + _prefixed(ip + ": ", _tb(rng, frames, "RuntimeError: NCCL error in: ../torch/"
                                           "csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
                                           "internal error, NCCL version 2.14.3\n"
                                           "ncclInternalError: Internal check failed."))
                + f"pdsh@{_host(rng)}: {ip}: ssh exited with exit code 1\n")
    if kind == "mpirun_nccl":
        # mpirun --tag-output: "[jobid,rank]<stderr>:" before each line
        frames = [("train_hvd.py", "<module>", "hvd.allreduce(t, name='loss')")]
        return _prefixed(f"[1,{rng.randrange(1, 8)}]<stderr>:", _tb(
            rng, frames, "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:219, unhandled cuda error, NCCL version 2.17.1\n"
            "ncclUnhandledCudaError: Call to CUDA function failed."))
    if kind == "nccl_retry":
        # NCCL's bootstrap (src/misc/socket.cc "Call to connect returned %s, retrying")
        h, pid = _host(rng), rng.randrange(1000, 9999)
        return "".join(f"{h}:{pid}:{pid + 3} [0] NCCL INFO Call to connect returned Connection "
                       "refused, retrying\n" for _ in range(rng.randrange(4, 12)))
    if kind == "aws_curl":
        # aws-sdk-cpp's CurlHttpClient ("Curl returned error code N") under TensorFlow's S3
        # filesystem (aws_logging.cc), its retry waits, then the traceback cut off
        t, out = rng.randrange(3600, 80000), []
        for i in range(rng.randrange(3, 7)):
            s = t + i * 9
            stamp = f"2026-01-09 {s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
            out += [f"{stamp}.{rng.randrange(10 ** 6):06d}: E tensorflow/core/platform/s3/"
                    f"aws_logging.cc:60] Curl returned error code {p.get('code', 28)}",
                    f"{stamp}.{rng.randrange(10 ** 6):06d}: W tensorflow/core/platform/s3/"
                    f"aws_logging.cc:57] Request failed, now waiting {100 * 2 ** i} ms before "
                    "attempting again."]
        return ("\n".join(out) + "\nTraceback (most recent call last):\n  File \"train.py\", "
                f"line {rng.randrange(50, 300)}, in <module>\n")
    if kind == "invalid_devfn":
        # cudaErrorInvalidDeviceFunction's string through THC's check ("cuda runtime error
        # (%d) : %s at %s:%d") or a program's own check
        return rng.choice([
            "/opt/torch/install/bin/luajit: /opt/torch/install/share/lua/5.1/nn/THNN.lua:110: "
            "cuda runtime error (8) : invalid device function at /tmp/luarocks_cutorch/cutorch/"
            "lib/THC/generic/THCTensorMath.cu:35\n",
            "CUDA error: invalid device function (cudaErrorInvalidDeviceFunction) at "
            f"src/kernels.cu:{rng.randrange(20, 400)}\n"])
    if kind == "loader_fnf_cut":
        # torch's DataLoader re-raising a worker's FileNotFoundError as its own type
        # (torch/_utils.py ExceptionWrapper.reraise: "Caught %s %s.\nOriginal %s"), the
        # worker's traceback cut off
        frames = _user_frames(rng)[:1] + [
            (f"{SITE}/torch/utils/data/dataloader.py", "_next_data",
             "return self._process_data(data)"),
            (f"{SITE}/torch/utils/data/dataloader.py", "_process_data", "data.reraise()"),
            (f"{SITE}/torch/_utils.py", "reraise", "raise exception")]
        tail = rng.choice(["", "Original Traceback (most recent call last):\n  File \""
                           f"{SITE}/torch/utils/data/_utils/worker.py\", line 308, in "
                           "_worker_loop\n    data = fetcher.fetch(index)\n"])
        return _tb(rng, frames, "FileNotFoundError: Caught FileNotFoundError in DataLoader "
                   f"worker process {rng.randrange(8)}.") + tail
    if kind in CUT_KINDS:
        return _cut(rng, p)
    if kind == "mpi_daemon_killed":
        # the transport that runs Open MPI's daemon says it was killed - srun's "srun: error:
        # %s: task %d: Killed" (plm slurm), or kubectl exec's "command terminated with exit
        # code 137" (Kubeflow's MPI operator, plm_rsh_agent) - then ORTE loses that daemon
        # (help text: kit._daemon_lost), once per daemon it lost
        a, b = rng.sample(["gpu-11", "gpu-12", "a100-n03", "dgx-07", "hgx-b02"], 2)
        jid = rng.randrange(1000, 99999)
        if p.get("n", 0) % 2:
            kill = f"srun: error: {b}: task {rng.randrange(1, 4)}: Killed\n"
        else:
            kill = "command terminated with exit code 137\n"
            a, b = f"mpijob-{jid}-launcher", f"mpijob-{jid}-worker-{rng.randrange(4)}"
        lost = "".join(_daemon_lost("ORTE", f"[[{jid},0],0] on node {a}",
                                    f"[[{jid},0],{i + 1}] on node {b}")
                       for i in range(rng.randrange(1, 3)))
        return kill + lost
    if kind == "nccl_setup_stop":
        return _nccl_setup_stop(rng, p.get("n", 0))
    if kind == "monitor_ticks":
        return _monitor_ticks(rng, p.get("n", 0))
    if kind == "c10d_retry":
        # c10d's client retrying rank 0's TCPStore (torch/csrc/distributed/c10d/socket.cpp,
        # C10D_WARNING at each try): "[c10d] The client socket has failed to connect to
        # [host]:port (errno: N - strerror)." (torch 2.0-2.3's "[W socket.cpp:N]" prefix) or
        # "... to any network address of (host, port)." (glog's "W<mmdd> hh:mm:ss.us" prefix
        # of later torch), until the log ends
        host = rng.choice(["gn01.cluster.local", "node-a07", "hgx-b07.ib", "10.20.0.11"])
        port = rng.choice([29500, 29400, 12355, 6000])
        err = rng.choice(["111 - Connection refused", "110 - Connection timed out",
                          "113 - No route to host"])
        t, out = rng.randrange(3600, 80000), []
        for i in range(rng.randrange(5, 14)):
            s = t + i * rng.randrange(5, 11)
            hms = f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
            if p.get("n", 0) % 2:
                out.append(f"[W{rng.choice(['0212', '0305'])} {hms}.{rng.randrange(10 ** 9):09d} "
                           f"socket.cpp:{rng.choice([752, 697])}] [c10d] The client socket has "
                           f"failed to connect to any network address of ({host}, {port}).")
            else:
                out.append(f"[W socket.cpp:{rng.choice([601, 663])}] [c10d] The client socket "
                           f"has failed to connect to [{host}]:{port} (errno: {err}).")
        return ("loading model and tokenizer\ninitialising torch.distributed (backend nccl, "
                f"init_method env://, MASTER_ADDR={host}, MASTER_PORT={port})\n"
                + "\n".join(out) + "\n")
    if kind == "ray_worker":
        return _ray_worker(rng, p.get("n", 0))
    raise ValueError(f"unknown f11_log kind {kind!r}")


# ---- the families of the second pass (hangs NCCL_DEBUG=INFO or a monitor shows, NCCL's
# verbs, the c10d store, GPU health checks, Ray's worker prefixes)

def _gloo_error(rng: random.Random, n: int) -> str:
    """gloo's TCP pair error (transport/tcp/pair.cc) under monitored_barrier's message."""
    peer = f"[10.1.{rng.randrange(255)}.{rng.randrange(1, 254)}]:{rng.randrange(30000, 60000)}"
    return [f"Connection closed by peer {peer}", f"Read error {peer}: Connection reset by peer"][
        n % 2]


def _dcgm_rows(g: int, n: int) -> str:
    """dcgmi diag's Hardware rows for a test that failed on GPU g (Diag.cpp's table): n even
    the GPU Memory test passing on the others and failing on g on the next row, n odd the
    Diagnostic test of -r 3 failing on g."""
    if n % 2 == 0:
        ok = ", ".join(str(i) for i in range(8) if i != g)
        return (f"| GPU Memory                | {'Pass - GPUs: ' + ok:<47}|\n"
                f"|                           | {'Fail - GPU: ' + str(g):<47}|")
    return ("| GPU Memory                | Pass - All                                     |\n"
            f"| Diagnostic                | {'Fail - GPU: ' + str(g):<47}|")


def _nccl_setup_stop(rng: random.Random, n: int) -> str:
    """NCCL_DEBUG=INFO's communicator set-up (init.cc, bootstrap.cc, net_ib.cc, graph/topo.cc,
    graph/search.cc, graph/connect.cc; "host:pid:tid [dev] NCCL INFO ..." from debug.h) that
    stops before "Init COMPLETE" with no error: n even stops early (the bootstrap, Init START,
    the affinity), n odd inside the topology dump or the search's result."""
    h, pid, d = _host(rng), rng.randrange(1000, 99999), rng.randrange(8)
    nranks, ip = rng.choice([8, 16, 32, 64]), f"10.3.{rng.randrange(255)}.{rng.randrange(1, 254)}"
    bus = rng.choice(["1b000", "41000", "86000", "c1000"])
    ver = rng.choice(["2.18.5+cuda12.2", "2.19.3+cuda12.3", "2.21.5+cuda12.4"])
    rank = rng.randrange(nranks)
    body = [f"cudaDriverVersion {rng.choice([12020, 12040, 12060])}",
            f"Bootstrap : Using ib0:{ip}<0>",
            f"NCCL version {ver}",
            f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:{ip}<0>",
            "Using network IB",
            "NCCL_IB_HCA set by environment to mlx5_0,mlx5_1",
            f"ncclCommInitRank comm 0x{rng.randrange(1 << 40):x} rank {rank} nranks {nranks} "
            f"cudaDev {d} nvmlDev {d} busId {bus} commId 0x{rng.randrange(1 << 60):x} - "
            "Init START",
            f"Setting affinity for GPU {d} to ffff,ffff0000,00000000",
            f"NVLS multicast support is not available on dev {d}",
            "=== System : maxBw 48.0 totalBw 48.0 ===",
            "CPU/1 (1/1/2)",
            f"+ PCI[48.0] - GPU/{bus.upper()} ({d})",
            f"GPU/{bus.upper()} :GPU/{bus.upper()} (0/5000.000000/LOC) CPU/1 (2/48.000000/PHB)",
            f"Pattern 4, crossNic 0, nChannels {rng.choice([2, 4])}, bw 40.000000/40.000000, "
            "type NVL/PIX, sameChannels 1",
            f"Trees [0] {(rank + 1) % nranks}/-1/-1->{rank}->{(rank - 1) % nranks} "
            f"[1] {(rank + 1) % nranks}/-1/-1->{rank}->{(rank - 1) % nranks}",
            "P2P Chunksize set to 524288"]
    if rank:  # only rank 0 prints the version
        body.remove(f"NCCL version {ver}")
    stop = rng.randrange(4, 9) if n % 2 == 0 else rng.randrange(11, len(body) + 1)
    tid = pid + rng.randrange(50, 90)
    return (f"[train] starting run {rng.randrange(1000, 9999)}: {nranks} ranks, NCCL_DEBUG=INFO\n"
            f"rank {rank}: building model, wrapping it in DistributedDataParallel\n"
            + "".join(f"{h}:{pid}:{tid} [{d}] NCCL INFO {ln}\n" for ln in body[:stop]))


def _monitor_ticks(rng: random.Random, n: int) -> str:
    """A job script's background status loop (`while sleep P; do echo "$(date '+%F %T') ..."`)
    writing into the job's log on a steady period from the start, the program's timed progress
    lines (logging's "%(asctime)s") between its ticks, then the program's last line and hours
    of ticks alone: n even two lines a tick (a liveness line and nvidia-smi --query-gpu's csv
    values behind the date) and the program's last line a print() of its own (no time), n odd
    one line a tick with `date -Is`'s ISO time and the program's last line its last timed step.
    (A timed last line that is no step, "<time> INFO running validation", is not read as the
    program's last line by endings._heartbeat_tail yet: no case of it here.)"""
    period = rng.choice([600, 900, 1200])
    t = rng.randrange(0, 4) * 3600 + rng.randrange(0, 600)
    jid, host = rng.randrange(100000, 999999), _host(rng)

    def stamp(s: int, iso: bool = False) -> str:
        hms = f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
        return f"2026-03-02T{hms}+00:00" if iso else f"2026-03-02 {hms}"

    def tick(s: int) -> str:
        if n % 2:
            return f"{stamp(s, True)} [watch] job {jid} alive on {host}\n"
        return (f"{stamp(s)} [monitor] job {jid} still running on {host}\n"
                f"{stamp(s)} [monitor] gpu: {rng.randrange(97, 101)} %, "
                f"{rng.randrange(60000, 79000)} MiB\n")

    out, loss, nxt, step = [f"{stamp(t)} INFO train: loading shards from /scratch/ds\n"], \
        rng.uniform(2, 4), t + period, 0
    stop = t + rng.randrange(2, 5) * period + rng.randrange(60, period - 60)
    while t < stop:  # training, the monitor ticking between
        t += rng.randrange(40, 90)
        if t >= nxt:
            out.append(tick(nxt + rng.randrange(0, 3)))
            nxt += period
        step += 50
        loss *= rng.uniform(0.97, 0.999)
        out.append(f"{stamp(t)},{rng.randrange(1000):03d} INFO train: step {step} "
                   f"loss {loss:.4f}\n")
    if n % 2 == 0:  # the program's last word, a print() of its own (no time)
        out.append(f"running validation ({rng.randrange(200, 900)} batches)\n")
    end = t + rng.randrange(2, 5) * 3600
    while nxt < end:  # the program quiet, the monitor on
        out.append(tick(nxt + rng.randrange(0, 3)))
        nxt += period
    return "".join(out)


def _ray_worker(rng: random.Random, n: int) -> str:
    """A worker's traceback as Ray's driver prints it (worker.py print_worker_logs): each line
    behind "(pid=N) " (a task; n even: a bare MemoryError, host memory) or "(Name pid=N,
    ip=A) " (an actor, Ray Train's RayTrainWorker; n odd: torch's CUDA out-of-memory)."""
    pid, ip = rng.randrange(1000, 99999), f"10.40.{rng.randrange(255)}.{rng.randrange(1, 254)}"
    if n % 2 == 0:
        frames = [("/home/u1/etl/prep.py", "preprocess_shard",
                   "table = pa.concat_tables(parts)"),
                  ("/home/u1/etl/prep.py", "_merge", "return pa.Table.from_pylist(rows)")]
        head = (f"(pid={pid}) preprocessing shard {rng.randrange(200)} of 256\n")
        return head + _prefixed(f"(pid={pid}) ", _tb(rng, frames, "MemoryError"))
    frames = [(f"{SITE}/ray/train/_internal/utils.py", "discard_return_wrapper",
               "train_func(*args, **kwargs)"),
              ("/home/u1/llm/train_ray.py", "train_loop_per_worker",
               "loss = model(**batch).loss"),
              (f"{SITE}/torch/nn/modules/module.py", "_call_impl",
               "return forward_call(*args, **kwargs)")]
    free, total = rng.uniform(0.2, 2.0), rng.choice([39.39, 79.15])
    exc = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
           f"{rng.choice([1.0, 2.0, 4.5])} GiB. GPU 0 has a total capacity of {total} GiB of "
           f"which {free:.2f} GiB is free. Including non-PyTorch memory, this process has "
           f"{total - free:.2f} GiB memory in use. Of the allocated memory "
           f"{total - free - 1.5:.2f} GiB is allocated by PyTorch, and 1.20 GiB is reserved by "
           "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
           "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/"
           "cuda.html#environment-variables)")
    prefix = f"(RayTrainWorker pid={pid}, ip={ip}) "
    return (prefix + "Moving model to device: cuda:0\n"
            + _prefixed(prefix, _tb(rng, frames, exc)))


# ---- a traceback cut before or inside its exception line (a paste, a log killed mid-write):
# what its last frames, or the launcher's line just before it, say. Frames follow CPython's
# traceback format; the libraries' frames are their functions (torch/serialization.py save /
# _save, torch/utils/data/dataloader.py, queue.py); launchers' lines as cited per kind.
CUT_KINDS = ("pickle_cut", "save_cut", "save_pickling", "sigint_torchrun_cut",
             "sigint_srun_cut", "wd_head_cut")
PROJECTS = ["/home/u1/det", "/scratch/u77/seg", "/work/ak/mask", "/gpfs/proj/lm"]


def _frames_text(rng: random.Random, frames: list[tuple[str, str, str]]) -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "{f}", line {rng.randrange(20, 1800)}, in {fn}\n    {code}\n'
        for f, fn, code in frames)


def _cut(rng: random.Random, p: dict) -> str:
    kind, n, proj = p["kind"], p.get("n", 0), rng.choice(PROJECTS)
    if kind == "pickle_cut":
        # pickle.load of a weights file that ends early (CPython's _pickle "UnpicklingError:
        # pickle data was truncated"), cut after the last frame or inside the exception's name
        fn = rng.choice(["_load_pickled_weights", "_load_file"])
        frames = [(f"{proj}/tools/train.py", "<module>", "main()"),
                  (f"{proj}/tools/train.py", "main", "model = build_model(cfg)"),
                  (f"{proj}/lib/checkpoint.py", "load_pretrained",
                   f"state = {'self.' if fn == '_load_file' else ''}{fn}(f)"),
                  (f"{proj}/lib/checkpoint.py", fn,
                   rng.choice(['data = pickle.load(f, encoding="latin1")',
                               "return pickle.load(f)", "blob = cPickle.load(f)"]))]
        tail = ["", "_pickle.Unpickl\n", "_pickle.UnpicklingEr\n"][n % 3]
        return (f"loading pretrained weights from {proj}/weights/R-{rng.choice([50, 101])}.pkl\n"
                + _frames_text(rng, frames) + tail)
    if kind in ("save_cut", "save_pickling"):
        # a trainer saving its checkpoint through torch.save (serialization.py save -> _save /
        # _legacy_save): cut inside the writer's frames, or whole with pickle's own error
        frames = [(f"{proj}/train.py", "<module>", "trainer.train()"),
                  (f"{SITE}/transformers/trainer.py", "_maybe_log_save_evaluate",
                   "self._save_checkpoint(model, trial)"),
                  (f"{SITE}/transformers/trainer.py", "_save_checkpoint",
                   'torch.save(self.optimizer.state_dict(), os.path.join(output_dir, '
                   '"optimizer.pt"))'),
                  (f"{SITE}/torch/serialization.py", "save", rng.choice([
                      "_save(obj, opened_zipfile, pickle_module, pickle_protocol)",
                      "_legacy_save(obj, opened_file, pickle_module, pickle_protocol)"]))]
        if kind == "save_pickling":
            frames.append((f"{SITE}/torch/serialization.py", "_save", "pickler.dump(obj)"))
            return _frames_text(rng, frames) + (
                "_pickle.PicklingError: Can't pickle <function <lambda> at 0x7f"
                f"{rng.randrange(16 ** 10):010x}>: attribute lookup <lambda> on __main__ "
                "failed\n")
        return _frames_text(rng, frames) + ["", f'  File "{SITE[:21]}'][n % 2] + "\n"
    if kind in ("sigint_torchrun_cut", "sigint_srun_cut"):
        # the launcher passed on a SIGINT: torchrun's agent (elastic/agent/server/api.py
        # "Received %s death signal, shutting down workers", multiprocessing/api.py "Sending
        # process %s closing signal SIGINT"), srun's second Ctrl-C ("interrupt (one more within
        # 1 sec to abort)", "sending Ctrl-C to StepId=%u.%u"); then the interrupted worker's
        # traceback, cut before its KeyboardInterrupt line
        pid = rng.randrange(1000, 99999)
        if kind == "sigint_torchrun_cut":
            head = ("W0301 10:11:12.345000 {pid} torch/distributed/elastic/agent/server/api.py:"
                    "723] Received 2 death signal, shutting down workers\nW0301 10:11:12.346000 "
                    "{pid} torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
                    "{w} closing signal SIGINT\n" if n % 2 else
                    "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, "
                    "shutting down workers\nWARNING:torch.distributed.elastic.multiprocessing."
                    "api:Sending process {w} closing signal SIGINT\n").format(pid=pid, w=pid + 17)
        else:
            step = f"{rng.randrange(10000, 999999)}.{rng.randrange(3)}"
            head = (f"srun: interrupt (one more within 1 sec to abort)\nsrun: StepId={step} "
                    f"task 0: running\nsrun: sending Ctrl-C to StepId={step}\n")
        frames = [(f"{proj}/train.py", "<module>", "main()"),
                  (f"{proj}/train.py", "train_epoch", "for batch in loader:"),
                  (f"{SITE}/torch/utils/data/dataloader.py", "__next__",
                   "data = self._next_data()"),
                  (f"{SITE}/torch/utils/data/dataloader.py", "_try_get_data",
                   "data = self._data_queue.get(timeout=timeout)")][:4 - n % 2]
        return head + _frames_text(rng, frames)
    # torch's watchdog (ProcessGroupNCCL.cpp: "Some NCCL operations have failed or timed
    # out...", "Process group watchdog thread terminated with exception: [Rank N] Watchdog
    # caught collective operation timeout: WorkNCCL(...)") after NCCL's INFO return codes
    # (debug.h "%s:%d -> %d"), the line cut inside the timeout's message
    r, host = rng.randrange(8), _host(rng)
    ret = "".join(f"{host}:{pid}:{pid + 5} [{r % 4}] NCCL INFO misc/socket.cc:{ln} -> 3\n"
                  for pid, ln in ((rng.randrange(1000, 99999), rng.choice([64, 80, 829, 881]))
                                  for _ in range(rng.randrange(3, 9))))
    stamp = f"[rank{r}]:[E0301 10:1{rng.randrange(10)}:29.{rng.randrange(10 ** 9):09d} "
    line = (f"{stamp}ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process "
            f"group watchdog thread terminated with exception: [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={rng.randrange(10, 9999)}, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600")
    cut = line.index("Watchdog caught") + len("Watchdog caught") + rng.randrange(2, 30)
    return (ret + f"{stamp}ProcessGroupNCCL.cpp:684] [Rank {r}] Some NCCL operations have failed "
            "or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
            "operations might run on corrupted/incomplete data.\n" + line[:cut] + "\n")


_CATALOGUED = catalogued(CATALOGUE["log"], globals())


def log(rng: random.Random, p: dict) -> str | tuple:
    """Template f11_log: a catalogue entry (catalogue/tuning_f11.yaml) or a kind built by code."""
    return _CATALOGUED(rng, p) if p["kind"] in CATALOGUE["log"] else _code(rng, p)


# logs that are the tool's or the scheduler's own output from their first line
PLAIN = ("tl_quiet", "tl_setup", "quiet_stop", "eval_nan", "pyxis_hook", "pyxis_denied",
         "pyxis_alone", "pdsh_nccl", "ds_runner_nccl", "mpirun_nccl", "nccl_setup_stop",
         "monitor_ticks", "c10d_retry")
# (exit code, signal) where the task did not just exit 1
CODES = {"tl_quiet": (None, 15), "tl_setup": (None, 15), "cancel_signal": (None, 15),
         "eval_nan": (0, None), "wd_abort": (None, 6), "wd_segv": (None, 11),
         "preempt_azure_event": (None, 15)}


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f11_*` case into `d`; return its label."""
    return compose(root, d, c, single={"f11_log": log}, plain=PLAIN, codes=CODES)

