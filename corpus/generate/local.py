"""Family `local`: single-process failures reproduced on this machine, outside Slurm.

python exceptions, missing files, import errors, permission errors (run as `nobody`: root
ignores file modes), disk full (a fresh 1 MiB tmpfs per case), host OOM (a real RLIMIT_AS),
native crashes, outside kills, unexplained exits and (noisy) successes.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

from common import PROGS, Running, case_dir, label, prog, run_parallel, shown, single, task_entry

PREFIXES = ("pyexc-", "fnf-", "imp-", "perm-", "full-", "hostoom-", "segv-", "killed-",
            "unknown-", "success-")
WORK = Path("/tmp/corpus-work")
NATIVE = WORK / "native"
PERM = WORK / "perm"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def _build_native() -> None:
    """Compile the native crash helpers, the broken extension, the bad_alloc program (the one
    copy of each lives in corpus/gen/progs/native/)."""
    src = PROGS / "native"
    NATIVE.mkdir(parents=True, exist_ok=True)
    cc = ["gcc", "-O0", "-g"]
    missing = ["-DMISSING=fused_adam_step_v2"]
    steps = [
        cc + ["-DCRASH_NO_MAIN", "-shared", "-fPIC", "-o", NATIVE / "libcrash.so",
              src / "crash.c"],
        cc + ["-DCRASH_NO_MAIN", "-o", NATIVE / "crashprog", src / "crashprog.c",
              src / "crash.c"],
        ["g++", "-O0", "-o", NATIVE / "badalloc", src / "cxx.cpp"],
        cc + missing + ["-DPYMOD=fused_ops", "-I/usr/include/python3.11", "-shared", "-fPIC",
                        "-o", NATIVE / "fused_ops.so", src / "ext.c"],
        cc + missing + ["-shared", "-fPIC", "-o", NATIVE / "libfused_ops.so", src / "ext.c"],
    ]
    for name in ("libcudart_stub.so.12", "libnccl_shim.so.2", "libtorch_ext.so"):
        steps.append(cc + ["-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", NATIVE / name,
                           src / "stublib.c"])
        steps.append(cc + ["-o", NATIVE / f"needs-{name.split('.')[0]}", src / "needlib.c",
                           NATIVE / name])
    for cmd in steps:
        subprocess.run([str(c) for c in cmd], check=True)
    for name in ("libcudart_stub.so.12", "libnccl_shim.so.2", "libtorch_ext.so"):
        (NATIVE / name).unlink()  # now the programs linked against them cannot start
    os.system(f"chmod -R a+rX {WORK}")


def _prepare_perm() -> None:
    if PERM.exists():
        shutil.rmtree(PERM)
    (PERM / "secret").mkdir(parents=True)
    (PERM / "readonly").mkdir()
    (PERM / "tools").mkdir()
    (PERM / "secret" / "train.yaml").write_text("lr: 0.1\n")
    (PERM / "secret" / "model.pt").write_bytes(b"PK\x03\x04")
    (PERM / "tools" / "prepare.sh").write_text("#!/bin/sh\necho preparing\n")
    for p, mode in [(PERM, 0o755), (PERM / "secret", 0o711), (PERM / "readonly", 0o755),
                    (PERM / "tools", 0o755), (PERM / "secret" / "train.yaml", 0o600),
                    (PERM / "secret" / "model.pt", 0o600), (PERM / "tools" / "prepare.sh", 0o644)]:
        os.chmod(p, mode)


def _limit_as(gib: float):
    def apply() -> None:
        n = int(gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    return apply


def _workdir(case_id: str) -> Path:
    d = WORK / "run" / case_id
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    os.chmod(d, 0o777)
    return d


def _py(case_id: str, cls: str, kind: str, variant: int, nobody: bool = False, **kw):
    def job() -> dict:
        wd = kw.pop("work", None) or _workdir(case_id)
        cmd = prog("pyfail", kind, variant, case_id, wd)
        text = ("(as nobody) " if nobody else "") + shown(cmd)
        return single(case_id, cls, (NOBODY if nobody else []) + cmd, shown=text, cwd=wd, **kw)
    job.case_id = case_id
    return job


def _shell(case_id: str, cls: str, script: str, **kw):
    def job() -> dict:
        wd = _workdir(case_id)
        return single(case_id, cls, ["bash", "-c", script], shown=f"bash -c {script!r}",
                      cwd=wd, **kw)
    job.case_id = case_id
    return job


def _full(case_id: str, variant: int, shell: str | None = None):
    """A fresh 1 MiB tmpfs as the working directory: the kernel's ENOSPC, nothing faked."""
    def job() -> dict:
        mnt = WORK / "full" / case_id
        mnt.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mnt)], check=True)
        try:
            if shell:
                return single(case_id, "disk_full", ["bash", "-c", shell.format(d=mnt)],
                              shown=f"bash -c {shell!r} (on a 1 MiB tmpfs)", cwd=mnt)
            cmd = prog("pyfail", "disk_full", variant, case_id, mnt)
            return single(case_id, "disk_full", cmd, shown=shown(cmd) + " (on a 1 MiB tmpfs)",
                          cwd=mnt)
        finally:
            subprocess.run(["umount", str(mnt)], check=False)
    job.case_id = case_id
    return job


def _killed(case_id: str, sig: int, after: float, variant: int):
    """A running trainer killed from outside after `after` seconds: no evidence but the signal."""
    def job() -> dict:
        d = case_dir(case_id)
        cmd = prog("pyfail", "long", variant, case_id)
        r = Running(cmd, d / "run.0.log", cwd=_workdir(case_id))
        time.sleep(after)
        r.signal_group(sig)
        rec = r.wait(timeout=30, kill_signal=signal.SIGKILL)
        return label(case_id, "killed", [task_entry(d, rec)],
                     command=shown(cmd) + f" (sent signal {sig} after {after:.1f}s)",
                     exit_code=rec["exit_code"], signal_=rec["signal"])
    job.case_id = case_id
    return job


def cases() -> list:
    jobs: list = []
    for i in range(33):
        jobs.append(_py(f"pyexc-{i:02d}", "python_exception", "python_exception", i))
    for i in range(30):
        jobs.append(_py(f"fnf-{i:02d}", "file_not_found", "file_not_found", i))
    jobs += [
        _shell("fnf-sh-cat", "file_not_found",
               "echo 'preparing data'; cat /data/imagenet/train_list.txt | head -n 5; "
               "set -e; test -s /data/imagenet/train_list.txt || exit 1"),
        _shell("fnf-sh-script", "file_not_found",
               f"echo starting; exec {prog('pyfail')[0]} /home/user/proj/trian.py --lr 0.1"),
        _shell("fnf-sh-source", "file_not_found",
               "set -e; echo 'loading env'; source ./env/activate.sh; python train.py"),
    ]
    for i in range(24):
        jobs.append(_py(f"imp-{i:02d}", "import_error", "import_error", i, work=NATIVE))
    for i, name in enumerate(("libcudart_stub", "libnccl_shim", "libtorch_ext") * 2):
        jobs.append(_shell(f"imp-ld-{i:02d}", "import_error",
                           f"echo 'launching solver (run {i})'; {NATIVE}/needs-{name}"))
    for i in range(30):
        jobs.append(_py(f"perm-{i:02d}", "permission_denied", "permission_denied", i,
                        nobody=True, work=PERM))
    for i, script in enumerate([
        "echo 'reading credentials'; cat {p}/secret/train.yaml",
        "echo 'running preprocessing'; {p}/tools/prepare.sh",
        "set -e; mkdir -p {p}/readonly/out/run1; echo ok",
        "echo 'copying model'; cp /etc/hostname {p}/readonly/model.bin",
    ]):
        jobs.append(_shell_as_nobody(f"perm-sh-{i}", script.format(p=PERM)))
    for i in range(28):
        jobs.append(_full(f"full-{i:02d}", i))
    jobs += [_full("full-sh-dd", 0, "echo caching; dd if=/dev/zero of={d}/cache.bin bs=64k "
                                    "count=100"),
             _full("full-sh-cp", 0, "set -e; head -c 3000000 /dev/urandom > /tmp/x.$$; "
                                    "cp /tmp/x.$$ {d}/shard.tar; rm -f /tmp/x.$$"),
             _full("full-sh-tar", 0, "tar -cf {d}/code.tar /usr/share/doc/bash /usr/bin/bash")]
    for i in range(24):
        gib = 6.0 if i % 6 in (3, 4) else 1.5  # torch itself needs address space to import
        jobs.append(_py(f"hostoom-{i:02d}", "host_oom", "host_oom", i, preexec=_limit_as(gib)))
    for i, mb in enumerate((64, 128, 256, 512, 100, 300)):
        cmd = [str(NATIVE / "badalloc"), "blocks", str(mb)]
        jobs.append(_cmd(f"hostoom-badalloc-{i}", "host_oom", cmd, preexec=_limit_as(1.0)))
    for i in range(18):
        jobs.append(_py(f"segv-{i:02d}", "segfault", "segfault", i, work=NATIVE,
                        env={"PYTHONFAULTHANDLER": "1"} if i % 5 == 0 else None))
    for i, how in enumerate(("null", "stack", "double_free", "ill", "bus") * 2):
        cmd = [str(NATIVE / "crashprog"), how, "/tmp", str(3 + i)]
        if i >= 5:  # through a shell script, which reports the signal itself
            jobs.append(_shell(f"segv-native-{i:02d}", "segfault",
                               f"echo 'stage 1 ok'; {' '.join(cmd)}; rc=$?; "
                               "echo \"solver exited with status $rc\" >&2; exit $rc"))
        else:
            jobs.append(_cmd(f"segv-native-{i:02d}", "segfault", cmd))
    sigs = [signal.SIGKILL] * 22 + [signal.SIGTERM] * 5 + [signal.SIGHUP] * 2 + [
        signal.SIGUSR1]
    for i, sig in enumerate(sigs):
        jobs.append(_killed(f"killed-{i:02d}", sig, 1.0 + (i % 7) * 0.5, i))
    for i in range(3):
        jobs.append(_shell(
            f"killed-sh-{i}", "killed",
            f"{' '.join(prog('pyfail', 'long', i, 'sh'))} & pid=$!; sleep {2 + i}; "
            "kill -9 $pid; wait $pid"))
    for i in range(30):
        jobs.append(_py(f"unknown-{i:02d}", "unknown", "unknown", i))
    for i in range(32):
        jobs.append(_py(f"success-{i:02d}", "success", "success", i))
    return jobs


def _cmd(case_id: str, cls: str, cmd: list[str], **kw):
    def job() -> dict:
        return single(case_id, cls, cmd, shown=shown(cmd), cwd=_workdir(case_id), **kw)
    job.case_id = case_id
    return job


def _shell_as_nobody(case_id: str, script: str):
    def job() -> dict:
        cmd = NOBODY + ["bash", "-c", script]
        return single(case_id, "permission_denied", cmd, shown=f"(as nobody) bash -c {script!r}",
                      cwd="/tmp")
    job.case_id = case_id
    return job


def generate(workers: int = 2) -> list[dict]:
    WORK.mkdir(parents=True, exist_ok=True)
    os.chmod(WORK, 0o755)
    _build_native()
    _prepare_perm()
    return run_parallel(cases(), workers=workers)


if __name__ == "__main__":
    import json
    import sys
    only = sys.argv[1:]  # optional id prefixes, to rerun a few cases by hand
    _build_native()
    _prepare_perm()
    picked = [j for j in cases() if not only or any(j.case_id.startswith(o) for o in only)]
    for lab in run_parallel(picked):
        print(json.dumps(lab))
