#!/usr/bin/env python3
"""`make demo`: run a handful of typical failing jobs on the local test cluster and show, for
each one, what Slurm says and what gpualert made of it.

Run as root after `docker/slurm-cluster/cluster up` (make demo does both). Jobs run as the
test user, with `--gpualert` when the SPANK plugin is installed. Takes about 90 s: one job
waits for its one-minute time limit on purpose.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "docker" / "slurm-cluster" / "cluster"

try:  # the installed copy (what the hooks run); the checkout when run from a bare clone
    from gpualert_slurm.core import slurm
except ImportError:
    sys.path.append(str(REPO))
    from gpualert_slurm.core import slurm


@dataclass(frozen=True)
class Example:
    name: str
    what: str
    script: str
    sbatch_args: tuple[str, ...] = ()


EXAMPLES = [
    Example("success", "trains and exits 0",
            "python3 -c 'print(\"epoch 1 loss 0.91\"); print(\"epoch 2 loss 0.55\"); "
            "print(\"done\")'\n"),
    Example("py-exception", "Python exception, exit 3",
            "python3 - <<'EOF'\n"
            "import sys, traceback\n"
            "print('loading config', flush=True)\n"
            "try:\n"
            "    cfg = {'lr': 0.1}\n"
            "    cfg['batch_size']\n"
            "except KeyError:\n"
            "    traceback.print_exc()\n"
            "    sys.exit(3)\n"
            "EOF\n"),
    Example("segfault", "native crash (SIGSEGV)",
            "echo 'calling into a native library'\n"
            "python3 -c 'import ctypes; ctypes.string_at(0)'\n"),
    Example("host-oom", "allocates 600 MB with --mem=100M",
            "python3 -c '\n"
            "b = bytearray(600 * 1024 * 1024)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "print(\"allocated\")'\n",
            ("--mem=100M",)),
    Example("time-limit", "sleeps past --time=1",
            "echo 'step 1 of many'\nsleep 300\n", ("--time=1",)),
    Example("rank1-fails", "3-node srun, rank 1 raises",
            "cat > rank.py <<'EOF'\n"
            "import os, time\n"
            "rank, node = int(os.environ['SLURM_PROCID']), os.environ['SLURMD_NODENAME']\n"
            "print(f'rank {rank} on {node}: loading shard {rank}', flush=True)\n"
            "if rank == 1:\n"
            "    raise RuntimeError(f'shard {rank} has 0 samples')\n"
            "time.sleep(3)\n"
            "print(f'rank {rank} done', flush=True)\n"
            "EOF\n"
            "srun -N3 -n3 python3 rank.py\n",
            ("-N3",)),
]


def die(msg: str) -> None:
    print(f"demo: {msg}", file=sys.stderr)
    sys.exit(1)


def facts() -> dict[str, str]:
    proc = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        die(f"the test cluster is not up:\n{proc.stderr.strip()}")
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def as_user(user: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    pw = pwd.getpwnam(user)
    env = [f"HOME={pw.pw_dir}", f"USER={user}", f"LOGNAME={user}", "PATH=/usr/bin:/bin",
           "LANG=C.UTF-8"]
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *env, *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def plugin_available(user: str, cwd: Path) -> bool:
    proc = as_user(user, ["sbatch", "--help"], cwd)
    return "--gpualert" in proc.stdout


def report(spool_dir: Path, maildir: Path, job_id: int, timeout: float = 60) -> tuple[str, str]:
    """(diagnosis, where the report is) from the verdict.json the job epilog wrote."""
    path = spool_dir / "verdict.json"
    deadline = time.monotonic() + timeout
    v = None
    while time.monotonic() < deadline:
        try:
            v = json.loads(path.read_text())
            if "report" in v or not (v.get("failed") or v.get("silent_failure")):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    if not isinstance(v, dict):
        return "-", "no verdict.json (is EpilogSlurmctld set? see `gpualert doctor`)"
    verdict = v.get("verdict") or {}
    diag = str(verdict.get("class"))
    if verdict.get("root_rank") is not None:
        diag += f" (rank {verdict['root_rank']}"
        diag += f" on {verdict['root_node']})" if verdict.get("root_node") else ")"
    rep = v.get("report")
    if not rep:
        return diag, "no mail (notify=fail, job did not fail)"
    where = f"mail {rep.get('status')}"
    pat = re.compile(rb"^X-Gpualert-Job: " + str(job_id).encode() + rb"\r?$", re.M)
    mails = [p for p in sorted(maildir.glob("*.eml")) if pat.search(p.read_bytes())]
    if mails:
        where += f": {mails[0]}"
    elif rep.get("outbox"):
        where += f": {rep['outbox']}"
    return diag, where


def main() -> int:
    if os.geteuid() != 0:
        die("run as root (it submits jobs as the test user and reads the root-owned spool)")
    f = facts()
    user, spool, root = f["user"], Path(f["spool"]), Path(f["root"])
    workdir = root / "work" / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    workdir.mkdir(parents=True)
    pw = pwd.getpwnam(user)
    os.chown(workdir, pw.pw_uid, pw.pw_gid)
    with_plugin = plugin_available(user, workdir)
    extra = [f"--gpualert=mail={user}@localhost"] if with_plugin else []
    print(f"demo: work dir {workdir}, jobs run as {user}")
    print("demo: submitting with --gpualert" if with_plugin else
          "demo: the gpualert SPANK plugin is not installed (sbatch has no --gpualert): "
          "submitting without it; no spool logs or diagnosis will appear")

    jobs: list[tuple[Example, int]] = []
    for ex in EXAMPLES:
        script = workdir / f"{ex.name}.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH -J {ex.name}\n#SBATCH -o {ex.name}-%j.out\n"
                          f"{ex.script}")
        script.chmod(0o755)
        os.chown(script, pw.pw_uid, pw.pw_gid)
        proc = as_user(user, ["sbatch", "--parsable", "--no-requeue", *extra, *ex.sbatch_args,
                              str(script)], workdir)
        m = re.match(r"(\d+)", proc.stdout.strip())
        if proc.returncode != 0 or not m:
            die(f"sbatch {ex.name} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        jobs.append((ex, int(m.group(1))))
        print(f"demo: job {m.group(1)} {ex.name:<13} {ex.what}")

    print("demo: waiting for all jobs to end (the time-limit one takes about 90 s)...")
    results = []
    for ex, job_id in jobs:
        st = slurm.settled_final(job_id, timeout=240)
        results.append((ex, job_id, st))

    print()
    print(f"{'JOB':>6}  {'NAME':<13} {'SLURM STATE':<14} {'EXIT':<6} {'DIAGNOSIS':<31} REPORT")
    failed = False
    for ex, job_id, st in results:
        if st is None:
            failed = True
            print(f"{job_id:>6}  {ex.name:<13} {'(no end seen)':<14} {'-':<6} {'-':<31} -")
            continue
        diagnosis, where = report(spool / str(job_id), Path(f["maildir"]), job_id) \
            if with_plugin else ("-", "-")
        print(f"{job_id:>6}  {ex.name:<13} {st.state:<14} {str(st.exit_code):<6} "
              f"{diagnosis:<31} {where}")
    print(f"\nJob output files: {workdir}")
    print(f"Any job's report in a terminal: GPUALERT_CONFIG={f['gpualert_config']} "
          f"{Path(os.environ.get('GPUALERT_VENV', '/opt/gpualert/venv'))}/bin/gpualert show JOBID")
    if with_plugin:
        print(f"gpualert spool (one dir a job, owned by {user}): {spool}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
