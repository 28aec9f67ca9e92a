"""f10k- (issue 22): jobs that end by a kill, a silence or the scheduler, run for real.

  f10k_ends.py ddp-kill RSS        under torchrun: rank 1 logs its memory use (RSS=1: in words a
                                   training logger writes, RSS=0: not) and is SIGKILLed - by the
                                   kernel's OOM killer when the caller put the job in a memory
                                   cgroup (`grow`), else by itself (`self`)
  f10k_ends.py grow MB_STEP        allocate MB_STEP MiB a step, logging host RAM used, until the
                                   memory cgroup the caller made kills it
  f10k_ends.py train SECONDS       a training loop that prints progress (a tqdm-like \\r bar and
                                   a numpy-style RuntimeWarning) for SECONDS (0: forever)
  f10k_ends.py stuck TIMEOUT       progress, then a lock nobody releases; faulthandler's
                                   dump_traceback_later(TIMEOUT, exit=True) dumps the threads
  f10k_ends.py quiet               progress, then exit 1 without a word
  f10k_ends.py spy PYSPY           a watchdog as users write one: the trainer (a child) goes
                                   quiet on a lock; the watchdog runs `py-spy dump` on it, kills
                                   it and exits 124 (PYSPY: the py-spy program)
  f10k_ends.py dask-oom            a Dask LocalCluster with a 300 MB worker memory limit and a
                                   task that needs 700 MB: the nanny restarts the worker, the
                                   scheduler gives up (KilledWorker)
  f10k_ends.py stuck-sig           (f11-) progress, faulthandler.register(SIGUSR1) as users add
                                   it to a job, then a lock nobody releases: a `kill -USR1`
                                   dumps every thread's stack, the job goes on hanging
  f10k_ends.py crash BUS|ILL|ABRT  (f11-) progress, then a real crash of the interpreter: a
                                   read of an mmap'd file truncated under it (SIGBUS), an
                                   illegal instruction executed (ud2, SIGILL), abort() (SIGABRT)
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings


def log(msg: str) -> None:
    print(msg, flush=True)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def grow(step_mb: int, say: bool = True) -> None:
    keep = []
    for i in range(10_000):
        keep.append(bytearray(step_mb << 20))
        for j in range(0, len(keep[-1]), 4096):  # touch every page: resident, not just mapped
            keep[-1][j] = 1
        if say:
            log(f"step {i} | loss {2.0 / (i + 1):.4f} | host RAM used: {rss_mb():.0f} MB")
        else:
            log(f"step {i} | loss {2.0 / (i + 1):.4f}")
        time.sleep(0.05)


def ddp_kill(say_rss: bool, how: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    for s in range(3):
        log(f"[rank {rank}] epoch 0 step {s * 10} loss {1.5 - s * 0.1:.3f}")
        time.sleep(0.2)
    if rank != 1:
        time.sleep(60)  # the launcher stops it once rank 1 is gone
        return
    if how == "grow":
        grow(64, say_rss)
    if say_rss:
        log(f"[rank {rank}] host memory: RSS {rss_mb():.0f} MB")
    os.kill(os.getpid(), signal.SIGKILL)


def train(seconds: float) -> None:
    import numpy as np

    t0, i = time.time(), 0
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        np.log(np.zeros(2))  # the RuntimeWarning numpy prints on a zero count
    while not seconds or time.time() - t0 < seconds:
        pct = (i % 50) * 2
        sys.stderr.write(f"\r{pct:3d}%|{'#' * (pct // 10):10s}| {i % 50}/50 "
                         f"[00:{i % 60:02d}<01:00, 1.00s/it]")
        sys.stderr.flush()
        i += 1
        time.sleep(0.5)


def stuck(timeout: float) -> None:
    import faulthandler

    for s in range(4):
        log(f"epoch 0 step {s} loss {1.0 / (s + 1):.3f}")
    if timeout:
        faulthandler.dump_traceback_later(timeout, exit=True)
    lock = threading.Lock()
    lock.acquire()
    threading.Thread(target=lock.acquire, name="loader", daemon=True).start()
    lock.acquire()  # never released: the loop waits forever


def stuck_sig() -> None:
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    log(f"pid {os.getpid()}: faulthandler on SIGUSR1 (kill -USR1 dumps the stacks)")
    stuck(0)


def crash(kind: str) -> None:
    import ctypes
    import mmap
    import tempfile

    for s in range(3):
        log(f"epoch 1 step {s * 100} loss {0.8 / (s + 1):.3f}")
    if kind == "BUS":  # a memory-mapped shard whose file was truncated under the reader
        with tempfile.TemporaryFile() as f:
            f.write(b"\0" * 65536)
            f.flush()
            m = mmap.mmap(f.fileno(), 65536, access=mmap.ACCESS_READ)
            log("reading the memory-mapped shard")
            f.truncate(0)
            log(str(m[40000]))
    elif kind == "ILL":  # code built for another CPU: an instruction this one rejects (ud2)
        m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        m.write(b"\x0f\x0b")
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        log("calling the fused kernel")
        ctypes.CFUNCTYPE(None)(addr)()
    else:  # a native library's failed check calls abort()
        log("checking the index header")
        ctypes.CDLL(None).abort()


def quiet() -> None:
    for s in range(5):
        log(f"epoch {s} step {s * 100} loss {1.0 / (s + 1):.3f}")
    sys.exit(1)


def spy(pyspy: str) -> None:
    import subprocess

    child = subprocess.Popen([sys.executable, __file__, "stuck", "0"])
    time.sleep(4)  # the trainer printed its steps and went quiet
    log("watchdog: no progress for 3 s, dumping the trainer's threads")
    subprocess.run([pyspy, "dump", "--pid", str(child.pid)], check=False)
    child.kill()
    child.wait()
    log("watchdog: trainer killed")
    sys.exit(124)


def dask_oom() -> None:
    import dask
    from distributed import Client, LocalCluster

    dask.config.set({"distributed.scheduler.allowed-failures": 1})

    def load_shard(i: int) -> int:
        buf = bytearray(700 << 20)
        for j in range(0, len(buf), 4096):
            buf[j] = 1
        return len(buf) + i

    with LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="300MB",
                      processes=True, dashboard_address=None) as cluster, Client(cluster) as c:
        log("loading shards on the Dask cluster")
        print(c.submit(load_shard, 7).result(), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "ddp-kill":
        ddp_kill(sys.argv[2] == "1", sys.argv[3] if len(sys.argv) > 3 else "self")
    elif mode == "grow":
        grow(int(sys.argv[2]), say=len(sys.argv) < 4 or sys.argv[3] != "0")
    elif mode == "train":
        train(float(sys.argv[2]))
    elif mode == "stuck":
        stuck(float(sys.argv[2]))
    elif mode == "quiet":
        quiet()
    elif mode == "spy":
        spy(sys.argv[2])
    elif mode == "dask-oom":
        dask_oom()
    elif mode == "stuck-sig":
        stuck_sig()
    elif mode == "crash":
        crash(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")
