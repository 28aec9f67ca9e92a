"""Benchmark: `gpualert classify` on three kinds of log, each against `grep -c` on the same file.

Kinds (generated in a temp dir, deleted afterwards):
- ordinary: realistic training output (timestamped step lines, NCCL INFO init lines, periodic
  warnings and eval lines), a CUDA OOM traceback at the end;
- gated: every line unique and holding prefilter words of the scanner (`step 12 worker 88 error
  rate 0.01 timeout 30 … nccl … id=<letters>`), the worst case for a prefilter; a CUDA OOM at
  the end;
- short: 20-character unique random lines (nothing to deduplicate; letters that spell no rule
  word), a CUDA OOM at the end;
- nccl: `NCCL_DEBUG=INFO` output of a 16-rank job, every line unique (hosts, pids, ranks,
  channels, bus ids, comm addresses, ring/tree layouts), the real log in which every line holds
  `NCCL` (the issue's worst case from practice), a CUDA OOM at the end.
Each is classified by `gpualert classify --json` in a subprocess (wall time, peak RSS of the
child); the verdict must be cuda_oom (the file's end is always read, even when the time budget
stops the head: then the verdict says "partial reading" and the MB/s is over the whole file).
The baseline is `grep -c error FILE` (GNU grep, one literal) on the same file in the same run;
the scanner is also run with GPUALERT_SCAN_PYTHON_FIRST=0 (grep from a range's start, the engine
before Python-first) beside it.
The scanner itself hands files of 1 MiB or more to GNU grep (the rules as EREs; see
gpualert_slurm/classify/scan/), and reads a long range of few line shapes (ordinary training
output) in pieces, one forked child per CPU (GPUALERT_SCAN_PARALLEL=0: one process), so the
ratio says how close it comes to grep's own floor;
the CPU seconds (the child and its grep, user + system) are printed too, since on a busy
machine wall time says more about the machine than about the scanner.
Targets: >= 500 MB/s ordinary, >= 200 MB/s gated, short and nccl, <= 100 MB peak RSS.

    python bench/bench_classify.py [--size-mb N] [--kinds ordinary,gated,short,nccl] [--repeat N]
                                   [--baseline REV]

--baseline REV runs REV's scanner (git archive of its gpualert_slurm) on each file too, in the
same run, and prints both: a change's before and after on the same machine, load and file.

With --repeat N each kind is measured N times on the same file (grep -c, then the scanner, each
time) and the medians are printed: the machine may be shared, and one run says little.

Exit non-zero only on error (a wrong verdict included), not on a missed target.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = {"ordinary": 500, "gated": 200, "short": 200, "nccl": 200}

TRACEBACK = """Traceback (most recent call last):
  File "/home/user/train.py", line 212, in <module>
    main()
  File "/home/user/train.py", line 188, in main
    loss = model(batch).loss
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 79.15 GiB of which 1.21 GiB is free.
[rank0]:[W1129 16:02:11.123 ProcessGroupNCCL.cpp:1168] Warning: WorkNCCL(SeqNum=3021) aborted
"""
GATE_WORDS = ["error", "timeout", "nccl", "memory", "failed", "abort", "denied", "exhausted",
              "cancelled", "quota", "warning", "fault", "interrupt", "oom", "xid", "nan"]
HEXLET = bytes.maketrans(b"0123456789abcdef", b"qwertyuiopasdfgh")  # ids of letters, not digits


def _fill(f, size: int, block: Callable[[], bytes]) -> None:
    """Write `block()`s to `f` until `size` bytes are written."""
    written = 0
    while written < size:
        b = block()
        f.write(b)
        written += len(b)


def _lines(line: Callable[[int], str], per_block: int) -> Callable[[], bytes]:
    """Blocks of `per_block` lines: line(1), line(2), … on from one block to the next."""
    n = itertools.count(1)
    return lambda: "".join(line(i) for i in itertools.islice(n, per_block)).encode()


def gen_ordinary(f, size: int, rnd: random.Random) -> None:
    warn = ("/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:558: "
            "UserWarning: This DataLoader will create 16 worker processes in total. Our suggested "
            "max number of worker in current system is 8. error handling may be slow.\n")
    f.write("".join(f"n1:2817:2817 [{g}] NCCL INFO Channel {c:02d}/32 : 0[{g}] -> 1[{g}] "
                    "via P2P/IPC\n" for g in range(8) for c in range(32)).encode())

    def line(step: int) -> str:
        out = (f"[2026-11-29 12:{step // 60 % 60:02d}:{step % 60:02d},"
               f"{rnd.randint(0, 999):03d}] INFO train: epoch {step // 50000} step "
               f"{step} loss={rnd.random() * 4:.4f} lr={3e-4 * rnd.random():.3e} "
               f"grad_norm={rnd.random() * 2:.3f} tokens/s={rnd.randint(90000, 130000)}"
               f" mem={60 + rnd.random() * 15:.1f}GB\n")
        if step % 1000 == 0:
            out += warn
        if step % 5000 == 0:
            out += f"eval step {step}: val_loss={rnd.random():.4f} (errors in 0 samples)\n"
        return out
    _fill(f, size, _lines(line, 2000))


def gen_gated(f, size: int, rnd: random.Random) -> None:
    w = GATE_WORDS

    def line(i: int) -> str:
        tag = format(i * 2654435761 % (1 << 40), "x").encode().translate(HEXLET).decode()
        return (f"step {i % 997} worker {i % 89} {w[i % 16]} rate 0.{i % 97:02d} "
                f"{w[(i * 7) % 16]} {i % 60} nccl id={tag}\n")
    _fill(f, size, _lines(line, 20000))


def gen_short(f, size: int, rnd: random.Random) -> None:
    # letters that spell no rule word: a random line of all letters and digits holds "EROFS"
    # or "EACCES" somewhere in a GiB (a real permission_denied line, and a wrong verdict);
    # no digits either, which the Python path would fold into a few shapes
    alphabet = (b"qwxzjvQWXZJV" * 22)[:256]
    table = bytes.maketrans(bytes(range(256)), alphabet)

    def block() -> bytes:
        r = rnd.randbytes(19 * 65536).translate(table)
        return b"\n".join(r[k:k + 19] for k in range(0, len(r), 19)) + b"\n"
    _fill(f, size, block)


def gen_nccl(f, size: int, rnd: random.Random) -> None:
    def line(i: int) -> str:
        host, rank = f"gpu{i % 64:03d}", i % 16
        pid = 20000 + (i * 7919) % 40000
        head = f"{host}:{pid}:{pid + i % 5} [{rank % 8}] NCCL INFO "
        k = i % 6
        if k == 0:
            body = (f"Channel {i % 32:02d}/32 : {rank}[{rank % 8}] -> {(rank + 1) % 16}"
                    f"[{(rank + 1) % 8}] via P2P/IPC/read")
        elif k == 1:
            body = (f"Channel {i % 32:02d}/0 : {rank}[{rank % 8}] -> {(rank + 8) % 16}"
                    f"[{rank % 8}] [send] via NET/IB/{i % 4}/GDRDMA")
        elif k == 2:
            body = (f"comm 0x{(i * 2654435761) % (1 << 44):x} rank {rank} nranks 16 "
                    f"cudaDev {rank % 8} busId {(i * 40503) % (1 << 20):x}0 - Init COMPLETE")
        elif k == 3:
            body = (f"Trees [{i % 32}] {(rank + 1) % 16}/-1/-1->{rank}->{(rank + 15) % 16}"
                    f" [{(i + 1) % 32}] -1/-1/-1->{rank}->{(rank + 7) % 16}")
        elif k == 4:
            body = (f"NET/IB : Using [{i % 4}]mlx5_{i % 4}:1/IB ; OOB ib0:10.{i % 250}."
                    f"{(i // 250) % 250}.{rank}<0>")
        else:
            body = (f"Connected all rings, comm 0x{(i * 40503) % (1 << 44):x} nRanks 16 "
                    f"busId {(i * 2654435761) % (1 << 20):x}0 localRanks 8 localRank "
                    f"{rank % 8} MNNVL 0")
        return head + body + "\n"
    _fill(f, size, _lines(line, 20000))


GEN = {"ordinary": gen_ordinary, "gated": gen_gated, "short": gen_short, "nccl": gen_nccl}


def run_child(cmd: list[str], env_add: dict | None = None,
              tree: Path = REPO) -> tuple[float, int, str, float]:
    """Wall seconds, peak RSS (KiB) of this child (wait4), stdout, CPU seconds (the child and
    the children it waited for: the scanner's grep). `tree`: where gpualert_slurm is imported
    from (the checkout, or a --baseline revision's copy)."""
    env = dict(os.environ, PYTHONPATH=str(tree), **(env_add or {}))
    with tempfile.TemporaryFile() as out:
        t = time.monotonic()
        # run in `tree`: `python -m` puts the working directory first on sys.path
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=tree)
        _, status, usage = os.wait4(p.pid, 0)
        dt = time.monotonic() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        if p.returncode not in (0, 1):  # grep -c exits 1 when it counts 0
            raise RuntimeError(f"{cmd[:4]} failed ({p.returncode}): {err[-2000:]}")
        out.seek(0)
        return dt, usage.ru_maxrss, out.read().decode(), usage.ru_utime + usage.ru_stime


def measure(path: Path, baseline: Path | None = None) -> dict:
    """One run: grep -c (the baseline), the scanner, and the scanner with grep from the start
    of each range (GPUALERT_SCAN_PYTHON_FIRST=0: the engine before Python-first), on the same
    cached file; with `baseline` (a revision's gpualert_slurm), that scanner too."""
    gdt, _, _, gcpu = run_child(["grep", "-c", "error", str(path)])
    cmd = [sys.executable, "-m", "gpualert_slurm", "classify", "--json", "--exit-code", "1",
           str(path)]
    dt, rss, out, cpu = run_child(cmd)
    v = json.loads(out)
    odt, _, oout, ocpu = run_child(cmd, {"GPUALERT_SCAN_PYTHON_FIRST": "0"})
    m = {"dt": dt, "rss": rss, "cpu": cpu, "gdt": gdt, "gcpu": gcpu, "v": v,
         "odt": odt, "ocpu": ocpu, "ov": json.loads(oout), "load": os.getloadavg()[0]}
    if baseline is not None:
        bdt, _, bout, bcpu = run_child(cmd, tree=baseline)
        m.update(bdt=bdt, bcpu=bcpu, bv=json.loads(bout))
    return m


def bench(kind: str, path: Path, size_mb: int, repeat: int = 1,
          baseline: tuple[str, Path] | None = None) -> bool:
    t = time.monotonic()
    with open(path, "wb") as f:
        GEN[kind](f, size_mb << 20, random.Random(7))
        f.write(TRACEBACK.encode())
    size = path.stat().st_size
    print(f"-- {kind}: generated {size / 2**20:.0f} MiB in {time.monotonic() - t:.1f} s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)", flush=True)
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL)  # same page cache for both
    runs = []
    for r in range(repeat):
        m = measure(path, baseline[1] if baseline else None)
        runs.append(m)
        mbs, gmbs = size / 1e6 / m["dt"], size / 1e6 / m["gdt"]
        if repeat > 1:
            print(f"   run {r + 1}: {mbs:6.1f} MB/s ({m['dt']:.2f} s, CPU {m['cpu']:.2f} s), "
                  f"grep -c {gmbs:6.1f} MB/s, ratio {mbs / gmbs:.3f}, "
                  f"RSS {m['rss'] / 1024:.0f} MiB, load {m['load']:.1f}", flush=True)
    ok = all(m["v"]["class"] == "cuda_oom" and m["ov"]["class"] == "cuda_oom" for m in runs)
    med = {k: statistics.median(m[k] for m in runs)
           for k in ("dt", "rss", "cpu", "gdt", "gcpu", "odt", "ocpu", "bdt", "bcpu")
           if k in runs[0]}
    ratio = statistics.median((size / m["dt"]) / (size / m["gdt"]) for m in runs)
    mbs, gmbs = size / 1e6 / med["dt"], size / 1e6 / med["gdt"]
    rss, v = med["rss"], runs[-1]["v"]
    what = f"median of {repeat} runs: " if repeat > 1 else ""
    print(f"   gpualert classify: {what}{mbs:7.1f} MB/s ({med['dt']:.2f} s, CPU "
          f"{med['cpu']:.2f} s), peak RSS {rss / 1024:.0f} MiB, verdict {v['class']} "
          f"({'right' if ok else 'WRONG'})")
    if "partial reading" in v["detail"]:  # the time budget stopped the head: how much was read
        m = re.search(r"after (\d+) MiB the time budget of ([\d.]+) s.*?the last (\d+) (MiB|KiB)",
                      v["detail"])
        if m:
            read = (int(m.group(1)) << 20) + (int(m.group(3)) << (20 if m.group(4) == "MiB"
                                                                   else 10))
            print(f"   partial reading: the {m.group(2)} s budget bounded it; scanned about "
                  f"{read / 2**20:.0f} MiB ({read / 1e6 / med['dt']:.1f} MB/s), the file's end "
                  "included" + (" (the tail ran out of budget: its last 256 KiB read after it)"
                                if "ran out in the tail" in v["detail"] else ""))
    print(f"   grep -c error:     {what}{gmbs:7.1f} MB/s ({med['gdt']:.2f} s, CPU "
          f"{med['gcpu']:.2f} s); gpualert/grep speed ratio {ratio:.3f} (CPU time ratio "
          f"{med['gcpu'] / max(med['cpu'], 1e-3):.3f})")
    print(f"   grep from the start (GPUALERT_SCAN_PYTHON_FIRST=0): {what}"
          f"{size / 1e6 / med['odt']:7.1f} MB/s ({med['odt']:.2f} s, CPU {med['ocpu']:.2f} s); "
          f"CPU ratio Python-first / grep-first {med['cpu'] / max(med['ocpu'], 1e-3):.3f}")
    # the scanner's speed per CPU second (it and its greps): what a busy machine says least about
    print(f"   per CPU second: gpualert {size / 1e6 / max(med['cpu'], 1e-3):.0f} MB (grep-first "
          f"{size / 1e6 / max(med['ocpu'], 1e-3):.0f} MB), grep -c "
          f"{size / 1e6 / max(med['gcpu'], 1e-3):.0f} MB")
    gib = size / 2**30
    print(f"   CPU-s per GiB: gpualert {med['cpu'] / gib:.2f}, grep -c {med['gcpu'] / gib:.2f}")
    if baseline is not None:  # the same file, the same minutes: before and after a change
        bv = runs[-1]["bv"]
        print(f"   before ({baseline[0]}): {what}{size / 1e6 / med['bdt']:7.1f} MB/s "
              f"({med['bdt']:.2f} s, CPU {med['bcpu']:.2f} s, {med['bcpu'] / gib:.2f} CPU-s per "
              f"GiB), verdict {bv['class']}; now {mbs:.1f} MB/s: x{med['bdt'] / med['dt']:.2f} "
              f"wall, x{med['bcpu'] / max(med['cpu'], 1e-3):.2f} CPU")
        ok = ok and all(m["bv"]["class"] == m["v"]["class"] for m in runs)
    print(f"   target >= {TARGET[kind]} MB/s: {'met' if mbs >= TARGET[kind] else 'NOT met'}; "
          f"<= 100 MB RSS: {'met' if rss / 1024 <= 100 else 'NOT met'}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="size of each generated log")
    ap.add_argument("--kinds", default="ordinary,gated,short,nccl")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per kind on the same file (a shared machine: medians are printed)")
    ap.add_argument("--baseline", metavar="REV",
                    help="also run the scanner of git revision REV (its gpualert_slurm, checked "
                         "out to a temp dir) on each file in the same run: before and after")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    bad = [k for k in kinds if k not in GEN]
    if bad:
        print(f"bench_classify: unknown kind(s) {bad}; known: {', '.join(GEN)}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from gpualert_slurm.classify import scan  # the settings the child scanner has too

    workers, split = getattr(scan, "WORKERS", 1), getattr(scan, "SPLIT_MIN", 0)
    print(f"scanner: grep {scan.GREP}, up to {workers} grep(s) per range of "
          f">= {split >> 20} MiB (GPUALERT_SCAN_WORKERS), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    ok = True
    with tempfile.TemporaryDirectory(prefix="gpualert-bench-") as d:
        baseline = None
        if args.baseline:
            tree = Path(d) / "baseline"
            tree.mkdir()
            arch = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline,
                                   "gpualert_slurm"], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=arch, check=True)
            baseline = (args.baseline, tree)
            # each tree's rule cache in the temp dir (its key differs), built before timing
            os.environ["GPUALERT_RULES_CACHE_DIR"] = str(Path(d) / "rules-cache")
            (Path(d) / "rules-cache").mkdir(mode=0o755)
            warm = Path(d) / "warm.log"
            warm.write_text(TRACEBACK)
            for t in (REPO, tree):
                run_child([sys.executable, "-m", "gpualert_slurm", "classify", str(warm)],
                          tree=t)
            print(f"baseline: the scanner of {args.baseline} beside this checkout's (rule "
                  "caches in the temp dir)")
        for kind in kinds:
            log = Path(d) / f"{kind}.log"
            ok = bench(kind, log, args.size_mb, max(1, args.repeat), baseline) and ok
            log.unlink()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
