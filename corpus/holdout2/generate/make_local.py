#!/usr/bin/env python3
"""Run the local holdout2 cases (root, no GPU) and capture them the way the tap does.

Each case's stdout and stderr go through ONE pipe into cases/<id>/run.<rank>.log, bytes
unchanged; the reaped wait status gives run.<rank>.exit. Failures are real: kernel errnos
(tmpfs of 512K, modes seen by the unprivileged user gpatest), real rlimits, real signals, a
stalling/resetting TCP server on 127.0.0.1, real torch/gloo behaviour. A case whose observed
outcome contradicts its intended class (see EXPECT) is dropped and reported.
Usage: make_local.py [case-id-prefix ...]; writes build/labels-local.jsonl.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROGS = HERE / "progs"
NATIVE_SRC = HERE / "native"
PY = "/opt/gpualert/corpus-venv/bin/python"
GIB = 1 << 30


def build_native(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cmds = [
        ["gcc", "-O0", "-o", out / "crash", NATIVE_SRC / "crash.c"],
        ["g++", "-O0", "-o", out / "cxx", NATIVE_SRC / "cxx.cpp"],
        ["gcc", "-shared", "-fPIC", "-o", out / "libfasttok.so.1", NATIVE_SRC / "fasttok.c"],
        ["gcc", "-o", out / "needlib", NATIVE_SRC / "needlib.c", f"-L{out}", "-l:libfasttok.so.1"],
        ["gcc", "-shared", "-fPIC", "-o", out / "libfused.so", NATIVE_SRC / "fused.c"],
    ]
    for c in cmds:
        subprocess.run([str(x) for x in c], check=True)
    (out / "libfasttok.so.1").unlink()  # the runtime library 'was not installed' on this node
    os.chmod(out, 0o755)


# ---- the local object store: stall / reset / partial / close / eof ----

class Server:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.conns: list[socket.socket] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        self.sock.settimeout(0.5)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(c)
            c.settimeout(2)
            try:
                if self.mode != "close":
                    c.recv(65536)
                if self.mode == "reset":
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                    c.close()
                elif self.mode == "partial":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                              b"Content-Length: 1048576\r\n\r\n" + b"\0" * 1024)
                    c.close()
                elif self.mode in ("close", "eof"):  # close: before the request; eof: after it
                    c.close()
                # stall: keep the connection open and never answer
            except OSError:
                pass

    def close(self) -> None:
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def fill(s: str, subs: dict[str, str]) -> str:
    """Substitute {NAME} placeholders only (inline programs contain other braces)."""
    for k, v in subs.items():
        s = s.replace("{" + k + "}", v)
    return s


# ---- capture ----

class Proc:
    def __init__(self, argv: list[str], log: Path, cwd: Path, env: dict, rlimit_as: int | None):
        def pre() -> None:
            os.setsid()
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if rlimit_as:
                resource.setrlimit(resource.RLIMIT_AS, (rlimit_as, rlimit_as))
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, cwd=cwd, env=env, preexec_fn=pre)
        self.log = log
        self.last_out = time.time()
        self.status: int | None = None
        self.end_time: float | None = None
        self.t = threading.Thread(target=self.copy, daemon=True)
        self.t.start()

    def copy(self) -> None:
        with open(self.log, "wb") as f:
            while True:
                b = os.read(self.p.stdout.fileno(), 65536)
                if not b:
                    break
                f.write(b)
                f.flush()
                self.last_out = time.time()

    def poll(self) -> bool:
        if self.status is None:
            pid, st = os.waitpid(self.p.pid, os.WNOHANG)
            if pid:
                self.status, self.end_time = st, time.time()
                self.p.returncode = 0  # reaped here; keep Popen from waiting again
        return self.status is not None

    def wait(self, bound: float) -> bool:
        t0 = time.time()
        while time.time() - t0 < bound:
            if self.poll():
                self.t.join(5)
                return True
            time.sleep(0.1)
        return False

    def kill(self, sig: int) -> None:
        if self.status is None:
            os.kill(self.p.pid, sig)

    def record(self) -> dict:
        st = self.status
        sig = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
        return {"exit_code": os.WEXITSTATUS(st) if os.WIFEXITED(st) else None, "signal": sig,
                "core_dumped": bool(os.WIFSIGNALED(st) and os.WCOREDUMP(st)),
                "end_time": round(self.end_time, 3)}


def run_case(c: dict, native: Path) -> dict | None:
    cid = c["id"]
    dest = ROOT / "cases" / cid
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"h2-{cid}-"))
    os.chmod(tmp, 0o755)
    mounted = False
    server = None
    subs = {"PY": PY, "PROGS": str(PROGS), "NATIVE": str(native), "TMP": str(tmp)}
    try:
        if c.get("tmpfs"):
            (tmp / "fs").mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512K", "tmpfs", str(tmp / "fs")],
                           check=True)
            mounted = True
            if c.get("user"):
                shutil.chown(tmp / "fs", c["user"], c["user"])
        if c.get("server"):
            server = Server(c["server"])
            subs["PORT"] = str(server.port)
        for cmd in c.get("setup", []):
            subprocess.run(fill(cmd, subs), shell=True, check=True, cwd=tmp,
                           stdout=subprocess.DEVNULL)
        if c.get("user"):
            for p in [tmp, *tmp.iterdir()]:
                if not p.name.startswith("rootonly") and p.name != "fs":
                    shutil.chown(p, c["user"], c["user"])
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(tmp),
               "LANG": "C.UTF-8", "PYTHONPATH": str(PROGS), "PYTHONUNBUFFERED": "1",
               **c.get("env", {})}
        env = {k: v for k, v in env.items() if v != ""}  # "" in a case's env unsets it
        ranks = c.get("ranks", 1)
        port = str(free_port())
        procs = []
        for r in range(ranks):
            argv = [fill(a, {**subs, "RANK": str(r), "PORT0": port}) for a in c["argv"]]
            if c.get("user"):
                argv = ["runuser", "-u", c["user"], "--", *argv]
            procs.append(Proc(argv, dest / f"run.{r}.log", tmp, env, c.get("rlimit_as")))
        t0 = time.time()
        hang = c.get("hang")
        if "kill_after" in c:
            after, sig, target = c["kill_after"]
            time.sleep(after)
            if target == "child":  # kill the shell's child, as an outside OOM/killer would
                kids = subprocess.run(["pgrep", "-P", str(procs[0].p.pid)], capture_output=True,
                                      text=True).stdout.split()
                os.kill(int(kids[0]), sig)
            else:
                procs[0].kill(sig)
        if hang:
            while not procs[0].poll() and time.time() - t0 < 120:
                if time.time() - procs[0].last_out > hang + 3:
                    procs[0].kill(signal.SIGTERM)  # the watchdog ends the silent job
                    break
                time.sleep(0.2)
        stuck = c.get("root_rank") if ranks > 1 else None
        for r, p in enumerate(procs):
            if r != stuck and not p.wait(c.get("bound", 90)):
                print(f"  {cid}: rank {r} still running after bound; killing", file=sys.stderr)
                p.kill(signal.SIGKILL)
                p.wait(10)
        if stuck is not None:
            time.sleep(1)
            procs[stuck].kill(signal.SIGTERM)  # the launcher tears down what is left
            if not procs[stuck].wait(5):
                procs[stuck].kill(signal.SIGKILL)
                procs[stuck].wait(10)
        for p in procs:
            p.t.join(5)
    finally:
        if server:
            server.close()
        if mounted:
            subprocess.run(["umount", str(tmp / "fs")], check=False)
        shutil.rmtree(tmp, ignore_errors=True)

    tasks = []
    for r, p in enumerate(procs):
        rec = p.record()
        (dest / f"run.{r}.exit").write_text(json.dumps(
            {"node": None, "step": "run", "rank": r, "pid": p.p.pid, **rec, "status": p.status}))
        tasks.append({"log": f"cases/{cid}/run.{r}.log", "rank": r, "node": None, "step": "run",
                      **rec})
    failed = [t for t in tasks if t["exit_code"] != 0]
    # the job's status: that of the task that failed first (later ones were torn down)
    job = min(failed, key=lambda t: t["end_time"]) if failed else tasks[0]
    label = {"id": cid, "class": c["class"], "root_rank": c.get("root_rank"),
             "source": "reproduced", "command": describe(c), "how": None,
             "exit_code": job["exit_code"], "signal": job["signal"], "slurm_state": None,
             "slurm_reason": None, "hang_threshold_s": None, "silence_s": None,
             "tasks": tasks, "kernel_log": None}
    if hang:
        label["hang_threshold_s"] = float(hang)
        label["silence_s"] = round(procs[0].end_time - procs[0].last_out, 2)
    why = check(c, label, dest)
    if why:
        print(f"DROP {cid}: {why}", file=sys.stderr)
        kept = HERE / "build" / "dropped" / cid  # kept for the record, outside cases/
        shutil.rmtree(kept, ignore_errors=True)
        shutil.move(dest, kept)
        return None
    return label


def describe(c: dict) -> str:
    """The label's command: what ran, with the setup that made the failure happen."""
    setup = "; ".join(c.get("setup", []))
    return c["cmd"] + (f"  (setup in {{TMP}}: {setup})" if setup else "")


def check(c: dict, label: dict, dest: Path) -> str | None:
    """The observed outcome must be the intended one; else the case is dropped."""
    text = "".join((dest / Path(t["log"]).name).read_text(errors="replace")
                   for t in label["tasks"])
    if c["class"] == "success":
        if any(t["exit_code"] != 0 for t in label["tasks"]):
            return f"meant to succeed, exit {[t['exit_code'] for t in label['tasks']]}"
    elif all(t["exit_code"] == 0 for t in label["tasks"]):
        return "meant to fail, but every task exited 0"
    if c.get("expect") and c["expect"].lower() not in text.lower():
        return f"expected text {c['expect']!r} not in the log"
    if c.get("expect_signal") and label["signal"] != c["expect_signal"] \
            and label["exit_code"] != 128 + c["expect_signal"]:
        return f"expected signal {c['expect_signal']}, got {label['signal']}/{label['exit_code']}"
    return None


def main() -> int:
    cases = json.loads((HERE / "local_cases.json").read_text())
    want = sys.argv[1:]
    if want:
        cases = [c for c in cases if any(c["id"].startswith(w) for w in want)]
    native = Path(tempfile.mkdtemp(prefix="h2-native-"))
    build_native(native)
    out = HERE / "build" / "labels-local.jsonl"
    (out.parent / "dropped").mkdir(parents=True, exist_ok=True)
    old = {}
    if want and out.exists():
        old = {json.loads(x)["id"]: x for x in out.read_text().splitlines() if x.strip()}
    kept, dropped = {}, []
    for c in cases:
        t0 = time.time()
        lab = run_case(c, native)
        print(f"{c['id']:<28} {c['class']:<18} {'kept' if lab else 'DROPPED'} "
              f"({time.time() - t0:.1f}s)", flush=True)
        if lab:
            kept[c["id"]] = json.dumps(lab)
        else:
            dropped.append(c["id"])
            old.pop(c["id"], None)
    old.update(kept)
    out.write_text("".join(v + "\n" for _, v in sorted(old.items())))
    shutil.rmtree(native, ignore_errors=True)
    print(f"{len(kept)} kept, dropped: {dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
