"""Benchmark: `gpualert classify` on a 1 GiB realistic training log vs a naive per-line loop.

Generates the log in a temp dir (deleted afterwards), runs `gpualert classify` on it in a
subprocess (wall time, peak RSS from RUSAGE_CHILDREN), then the naive baseline - every rule
regex on every line, same rules - in another subprocess on a prefix of the same file (the naive
loop would take many minutes on the whole GiB; its rate is per MB either way). Prints MB/s,
peak RSS and the speed ratio. Targets: >= 200 MB/s, <= 100 MB peak RSS. Exit non-zero only on
error (including a wrong verdict on the generated log).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TRACEBACK = """Traceback (most recent call last):
  File "/home/user/train.py", line 212, in <module>
    main()
  File "/home/user/train.py", line 188, in main
    loss = model(batch).loss
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1518, in call
    return self._call_impl(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 79.15 GiB of which 1.21 GiB is free.
[rank0]:[W1129 16:02:11.123 ProcessGroupNCCL.cpp:1168] Warning: WorkNCCL(SeqNum=3021) aborted
"""

NAIVE = r"""
import sys, time
from gpualert_slurm.classify.rules import load_rules
rs = load_rules()
rules = rs.for_source("log")
path, limit = sys.argv[1], int(sys.argv[2])
n = hits = 0
t = time.monotonic()
with open(path, "rb") as f:
    for raw in f:
        n += len(raw)
        line = raw.decode("utf-8", "replace").rstrip()
        for r in rules:            # the plain loop: every rule, every pattern, every line
            if r.match(line):
                hits += 1
        if n >= limit:
            break
print(n, hits, time.monotonic() - t)
"""


def generate(path: Path, size: int, seed: int = 7) -> None:
    rnd = random.Random(seed)
    warn = ("/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:558: "
            "UserWarning: This DataLoader will create 16 worker processes in total. Our suggested "
            "max number of worker in current system is 8, which is smaller than what this "
            "DataLoader is going to create. error handling may be slow.\n")
    with open(path, "w") as f:
        f.write("".join(f"n1:2817:2817 [{g}] NCCL INFO Channel {c:02d}/32 : 0[{g}] -> 1[{g}] "
                        "via P2P/IPC\n" for g in range(8) for c in range(32)))
        written, step = 0, 0
        end = size - 4096
        while written < end:
            block = []
            for _ in range(2000):
                step += 1
                block.append(
                    f"[2026-11-29 12:{step // 60 % 60:02d}:{step % 60:02d},"
                    f"{rnd.randint(0, 999):03d}]"
                    f" INFO train: epoch {step // 50000} step {step} loss={rnd.random() * 4:.4f} "
                    f"lr={3e-4 * rnd.random():.3e} grad_norm={rnd.random() * 2:.3f} "
                    f"tokens/s={rnd.randint(90000, 130000)} mem={60 + rnd.random() * 15:.1f}GB\n")
                if step % 1000 == 0:
                    block.append(warn)
                if step % 5000 == 0:
                    block.append(f"eval step {step}: val_loss={rnd.random():.4f} "
                                 f"accuracy={rnd.random():.4f} (errors in 0 samples)\n")
            s = "".join(block)
            f.write(s)
            written += len(s)
        f.write(TRACEBACK)


def run_child(cmd: list[str]) -> tuple[float, int, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    dt = time.monotonic() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed ({p.returncode}): {p.stderr[-2000:]}")
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, rss_kib, p.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--naive-mb", type=int, default=32, help="prefix the naive loop reads")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpualert-bench-") as d:
        log = Path(d) / "batch.0.log"
        t = time.monotonic()
        generate(log, args.size_mb << 20)
        size = log.stat().st_size
        print(f"generated {size / 2**20:.0f} MiB log in {time.monotonic() - t:.1f} s "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)", flush=True)
        dt, rss, out = run_child([sys.executable, "-m", "gpualert_slurm", "classify", "--json",
                                  "--exit-code", "1", str(log)])
        verdict = json.loads(out)
        ok = verdict["class"] == "cuda_oom"
        rate = size / 2**20 / dt
        print(f"gpualert classify: {rate:.0f} MiB/s ({dt:.2f} s), peak RSS {rss / 1024:.0f} MiB, "
              f"verdict {verdict['class']} ({'right' if ok else 'WRONG'})", flush=True)
        limit = min(size, args.naive_mb << 20)
        _, _, nout = run_child([sys.executable, "-c", NAIVE, str(log), str(limit)])
        nbytes, _, ndt = nout.split()
        nrate = int(nbytes) / 2**20 / float(ndt)
        print(f"naive per-line loop: {nrate:.1f} MiB/s (on the first {int(nbytes) >> 20} MiB)")
        print(f"speed-up: {rate / nrate:.0f}x; targets: >= 200 MiB/s "
              f"[{'met' if rate >= 200 else 'NOT met'}], <= 100 MiB RSS "
              f"[{'met' if rss / 1024 <= 100 else 'NOT met'}]")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
