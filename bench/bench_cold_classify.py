"""Benchmark: the cold start of `gpualert classify` on a small (1 KB) log, beside Python's own.

Every epilog classifies its job in a fresh process, so what a small log costs is mostly start-up:
the imports and the rule set (about 800 regexes, their literal tables). Each variant runs as a
fresh process:
- `python -c pass`: the interpreter's own start, the floor;
- `python -c "import gpualert_slurm"`: the package, nothing of the classifier;
- classify, cache hit: the rule cache as `make install` or the last epilog left it (the case of
  every job: gpualert_slurm/classify/rulecache.py);
- classify, no cache (GPUALERT_RULES_CACHE_DIR=off): the rules built from the YAML files, as
  every run did before the cache;
- classify, site rule just changed (root only): a rules.d file edited before each run, so each
  run is a miss that builds the rules and writes the cache.
The variants run interleaved (one of each, --repeat times, after one warm-up round) so that the
load of a shared machine falls on all alike; the medians of wall time and of CPU time (the
child's user + system) are printed, with the ratios to `python -c pass`. Each classify run must
say cuda_oom. Target (issue 22): <= 150 ms wall with the cache; the issue's machine started
Python in 60 ms, so that target is 2.5 x Python's own start there, and the ratio is printed
too (wall time on a loaded machine says more about the machine than about the code; CPU time
less so).

It measures the interpreter running it (make bench: the installed venv) from a neutral working
directory, so the installed package is what runs (with its .pyc files), in a temporary cache
directory and rules.d; --pythonpath DIR measures the package in DIR instead.

    python bench/bench_cold_classify.py [--repeat N] [--pythonpath DIR]

Exit non-zero only on error (a wrong verdict included), not on a missed target.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 150.0
ISSUE_PYTHON_MS = 60.0  # Python's start on the machine of the issue's figures
LOG = """[2026-11-29 12:00:01,112] INFO train: epoch 0 step 100 loss=2.4312 lr=3.000e-04
[2026-11-29 12:00:02,481] INFO train: epoch 0 step 200 loss=2.1175 lr=3.000e-04
[2026-11-29 12:00:03,907] INFO train: epoch 0 step 300 loss=1.9821 lr=3.000e-04
/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:558: UserWarning: This \
DataLoader will create 16 worker processes in total.
[2026-11-29 12:00:05,330] INFO train: epoch 0 step 400 loss=1.8406 lr=3.000e-04
[2026-11-29 12:00:06,702] INFO train: epoch 0 step 500 loss=1.7719 lr=3.000e-04
[2026-11-29 12:00:08,115] INFO eval: step 500 val_loss=1.8021 (errors in 0 samples)
[2026-11-29 12:00:09,540] INFO train: epoch 0 step 600 loss=1.7034 lr=3.000e-04
Traceback (most recent call last):
  File "/home/user/train.py", line 212, in <module>
    main()
  File "/home/user/train.py", line 188, in main
    loss = model(batch).loss
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 79.15 GiB of which 1.21 GiB is free.
"""
SITE_RULE = ("rules:\n  - id: bench_site_{n}\n    class: disk_full\n    priority: 90\n"
             "    patterns: ['BENCHQUOTA-{n} exhausted']\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9, help="runs of each variant (median)")
    ap.add_argument("--pythonpath", help="measure the package in this directory")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpualert-bench-cold-"))
    os.chmod(tmp, 0o755)
    try:
        return run(tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp: Path, args: argparse.Namespace) -> int:
    log = tmp / "0.0.log"
    log.write_text(LOG)
    cache, site = tmp / "cache", tmp / "rules.d"
    cache.mkdir(mode=0o755)
    site.mkdir(mode=0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE") and not k.startswith("GPUALERT_")}
    env.update(GPUALERT_RULES_CACHE_DIR=str(cache), GPUALERT_RULES_DIR=str(site))
    if args.pythonpath:
        env["PYTHONPATH"] = str(Path(args.pythonpath).resolve())
    py = sys.executable
    # the console script users and hooks run (`python -m` would add runpy's import)
    script = Path(py).parent / "gpualert"
    cli = [str(script)] if script.is_file() else [py, "-m", "gpualert_slurm"]
    classify = [*cli, "classify", "--json", "--exit-code", "1", str(log)]
    where = subprocess.run([py, "-c", "import gpualert_slurm as g; print(g.__file__, "
                            "g.__version__)"], capture_output=True, text=True, env=env,
                           cwd=tmp, check=True).stdout.strip()
    print(f"python {py} ({sys.version.split()[0]}); package {where}; classify: "
          f"{' '.join(cli)} classify")
    print(f"log: {log.stat().st_size} bytes; {args.repeat} runs of each variant, interleaved, "
          f"after one warm-up round; medians")
    root = os.geteuid() == 0
    n_site = [0]
    probe = ""

    def site_changed() -> None:  # each run: another site rule, another key, a miss
        n_site[0] += 1
        (site / "bench.yaml").write_text(SITE_RULE.format(n=n_site[0]))

    variants: list[tuple[str, list[str], dict, object]] = [
        ("python -c pass", [py, "-c", "pass"], {}, None),
        ("python -c 'import gpualert_slurm'", [py, "-c", "import gpualert_slurm"], {}, None),
    ]
    if root:
        variants.append(("classify, rule cache hit", classify, {}, None))
    variants.append(("classify, no rule cache", classify, {"GPUALERT_RULES_CACHE_DIR": "off"},
                     None))
    if root:
        variants.append(("classify, site rule just changed (miss, writes)", classify, {},
                         site_changed))
    else:
        print("not root: no cache can be written, so only the uncached classify is measured")
    if root:  # the cache the hit variant reads (install.sh builds it the same way)
        subprocess.run([py, "-m", "gpualert_slurm.classify.build_cache"], env=env, cwd=tmp,
                       check=True, capture_output=True)
        probe = subprocess.run([py, "-c", "from gpualert_slurm.classify import load_rules; "
                                "print(load_rules().cached)"], env=env, cwd=tmp, check=True,
                               capture_output=True, text=True).stdout.strip()
        if probe == "None":
            print("bench: the rule cache was not read back", file=sys.stderr)
            return 1
    walls: dict[str, list[float]] = {v[0]: [] for v in variants}
    cpus: dict[str, list[float]] = {v[0]: [] for v in variants}
    for rnd in range(args.repeat + 1):
        for name, cmd, extra, before in variants:
            if before is not None:
                before()  # type: ignore[operator]
            if name.startswith("classify, rule cache hit") and n_site[0]:
                (site / "bench.yaml").unlink(missing_ok=True)  # the cached key's rules again
            wall, cpu, out = _one(cmd, dict(env, **extra), tmp)
            if before is not None:  # the misses' files go: the hit's is never pruned
                for f in cache.glob("rules-*.json"):
                    if str(f) != probe:
                        f.unlink()
            if cmd is classify and json.loads(out)["class"] != "cuda_oom":
                print(f"bench: {name}: verdict {out[:200]}, not cuda_oom", file=sys.stderr)
                return 1
            if rnd:  # the first round warms the page cache and the .pyc files
                walls[name].append(wall)
                cpus[name].append(cpu)
    base_w = statistics.median(walls["python -c pass"])
    base_c = statistics.median(cpus["python -c pass"])
    print(f"{'variant':<50} {'wall ms':>8} {'x pass':>7} {'cpu ms':>8} {'x pass':>7}")
    for name, _, _, _ in variants:
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"{name:<50} {w:8.1f} {w / base_w:7.2f} {c:8.1f} {c / max(base_c, 0.1):7.2f}")
    if root:
        hit = statistics.median(walls["classify, rule cache hit"])
        hit_c = statistics.median(cpus["classify, rule cache hit"])
        off = statistics.median(walls["classify, no rule cache"])
        print(f"cache hit: {hit:.0f} ms wall, {hit_c:.0f} ms CPU (target <= {TARGET_MS:.0f} ms "
              f"wall: {'met' if hit <= TARGET_MS else 'MISSED'}); {hit / base_w:.1f} x Python's "
              f"start (the target is {TARGET_MS / ISSUE_PYTHON_MS:.1f} x on the issue's machine: "
              f"{'met' if hit / base_w <= TARGET_MS / ISSUE_PYTHON_MS else 'MISSED'}); "
              f"{off / hit:.1f} x faster than without the cache")
    load = os.getloadavg()
    print(f"load average now: {' '.join(f'{x:.1f}' for x in load)} on {os.cpu_count()} CPUs"
          + (" (more runnable processes than CPUs: the wall times are inflated, the CPU times "
             "less so)" if load[0] > (os.cpu_count() or 1) else ""))
    return 0


def _one(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float, str]:
    """Wall ms, CPU ms (user + system of the child) and stdout of one run."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    wall = (time.perf_counter() - t0) * 1000
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000
    return wall, cpu, p.stdout


if __name__ == "__main__":
    sys.exit(main())
