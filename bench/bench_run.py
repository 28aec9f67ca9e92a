"""`gpualert run` overhead: start-up (`gpualert run -- true` vs `true`) and throughput (1 GiB
through `gpualert run` vs through `cat`, both to /dev/null; gpualert also writes its log to disk).

    bench_run.py [--runs N] [--bytes SIZE]      (defaults: 30 runs, 1 GiB)
Prints figures and ratios against the baseline measured in the same run; exits non-zero only
when a command fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from gpualert_slurm.core.options import parse_size  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
GPUALERT = [sys.executable, "-m", "gpualert_slurm", "run"]


def timed(cmd: list[str] | str, shell: bool = False) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=shell, env=ENV, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1] if len(xs) >= 2 else xs[0]


def startup(runs: int, tmp: str) -> None:
    true = shutil.which("true") or "/bin/true"
    base, ours = [], []
    for i in range(runs):  # interleaved, so drift in machine load hits both alike
        base.append(timed([true]))
        ours.append(timed([*GPUALERT, "--log-dir", f"{tmp}/s{i}", "--", true]))
    mb, mo = statistics.median(base), statistics.median(ours)
    print(f"startup, {runs} runs each (wall seconds):")
    print(f"  true                      median {mb * 1e3:8.2f} ms   p95 {p95(base) * 1e3:8.2f} ms")
    print(f"  gpualert run -- true      median {mo * 1e3:8.2f} ms   p95 {p95(ours) * 1e3:8.2f} ms")
    print(f"  overhead                  {(mo - mb) * 1e3:.2f} ms per run (median), "
          f"ratio {mo / mb:.1f}x")


def throughput(nbytes: int, tmp: str) -> None:
    src = f"head -c {nbytes} /dev/zero"
    gpa = " ".join(GPUALERT)
    t_cat = timed(f"{src} | cat > /dev/null", shell=True)
    t_gpa = timed(f"{gpa} --log-dir {tmp}/t -- {src} > /dev/null", shell=True)
    logged = os.path.getsize(f"{tmp}/t/output.log")
    if logged != nbytes:
        raise SystemExit(f"bench: output.log has {logged} bytes, expected {nbytes}")
    mib = nbytes / 2**20
    print(f"throughput, {mib:.0f} MiB to /dev/null:")
    print(f"  cat                       {mib / t_cat:8.0f} MiB/s  ({t_cat:.2f} s)")
    print(f"  gpualert run (+ log file) {mib / t_gpa:8.0f} MiB/s  ({t_gpa:.2f} s)")
    print(f"  ratio                     {t_gpa / t_cat:.2f}x the time of cat")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--bytes", default="1G", help="size like 500K, 20M, 1G (default 1G)")
    a = ap.parse_args()
    try:
        nbytes = parse_size(a.bytes)
    except ValueError:
        ap.error(f"--bytes {a.bytes}: expected a size like 500K, 20M or 1G")
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="gpualert-bench-") as tmp:
        try:
            startup(a.runs, tmp)
            throughput(nbytes, tmp)
        except subprocess.CalledProcessError as e:
            print(f"bench: command failed: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
