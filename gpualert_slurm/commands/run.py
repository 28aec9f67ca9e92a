"""`gpualert run [--log-dir DIR] [--name NAME] [--classify] -- CMD ARGS...`

Runs CMD outside Slurm with the guarantees the plugin gives a Slurm task:
- the log directory (run.json, output.log) is on disk before CMD can run, and an exec failure
  leaves a log that says so;
- CMD's stdout and stderr pass through byte for byte (os.read/os.write, no decoding) and are
  appended, interleaved as read, to output.log; exit.json records how it ended;
- our exit status is CMD's (128+N when killed by signal N; 127/126 when it cannot be run), and
  no failure of ours (log unwritable, disk full) changes it or stops the output;
- SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 sent to us reach CMD. Signals the terminal sends
  to the whole foreground group (Ctrl-C) reach CMD directly and are not sent twice.
When CMD exits while something it started still holds its output open, we copy on for at most
FLUSH_IDLE_S of silence / FLUSH_MAX_S in all, then exit (the rest is not captured, and we say so).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
SI_KERNEL = 0x80  # si_code of signals the kernel itself sends, e.g. the tty's Ctrl-C
BUF = 1 << 20
# Python ignores SIGPIPE/SIGXFSZ for itself: the child gets the defaults, as from a shell.
# (glibc's posix_spawn leaves its internal signals 32/33 ignored; glibc's own code in the child
# installs its handlers for them when it needs them, and nothing else may use them.)
_SIGDEF = (signal.SIGPIPE, signal.SIGXFSZ)
FLUSH_IDLE_S = 0.25
FLUSH_MAX_S = 2.0
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

USAGE = """usage: gpualert run [--log-dir DIR] [--name NAME] [--classify] -- CMD [ARGS...]

Runs CMD, passing its output through unchanged, and keeps a durable log of it:
  DIR/run.json     the command, start time, host, pid (written before CMD starts)
  DIR/output.log   every byte CMD wrote to stdout and stderr
  DIR/exit.json    exit code or signal, end time
Exit status: CMD's own; 128+N if it was killed by signal N; 127/126 if it could not be run.

  --log-dir DIR  the run's directory (default: $GPUALERT_RUN_DIR, else
                 ~/.local/state/gpualert/runs, plus /<timestamp>-<pid>[-NAME])
  --name NAME    label added to the default directory name and run.json
  --classify     print a one-line diagnosis of a failed run at the end"""


class UsageError(Exception):
    pass


def parse_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    opts: dict[str, Any] = {"log_dir": None, "name": None, "classify": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a in ("-h", "--help"):
            opts["help"] = True
            return opts, []
        if a == "--classify":
            opts["classify"] = True
        elif a in ("--log-dir", "--name") or a.startswith(("--log-dir=", "--name=")):
            key, eq, val = a.partition("=")
            if not eq:
                i += 1
                if i >= len(argv):
                    raise UsageError(f"{key} needs a value")
                val = argv[i]
            if not val:
                raise UsageError(f"{key} needs a non-empty value")
            opts[key[2:].replace("-", "_")] = val
        elif a.startswith("-"):
            raise UsageError(f"unknown option {a}")
        else:
            break
        i += 1
    cmd = argv[i:]
    if not cmd:
        raise UsageError("no command given")
    return opts, cmd


def _default_dir(name: str | None) -> str:
    base = os.environ.get("GPUALERT_RUN_DIR") or os.path.join(
        os.path.expanduser("~"), ".local", "state", "gpualert", "runs")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    label = "".join(c if c.isalnum() or c in "._-" else "_" for c in (name or ""))[:60]
    return os.path.join(base, f"{stamp}-{os.getpid()}" + (f"-{label}" if label else ""))


class RunLog:
    """The run's directory. Every failure here is reported once on stderr and then ignored:
    the command runs and its status is returned whether or not we can keep a log."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir_fd: int | None = None
        self.out_fd: int | None = None
        self.bytes = 0
        self._warned = False

    def warn(self, what: str, err: BaseException) -> None:
        if not self._warned:
            self._warned = True
            _stderr(f"gpualert: warning: {what} {self.path}: {_strerror(err)}; the command runs"
                    " on without a (complete) log\n")

    def open(self, run_record: dict[str, Any]) -> None:
        from gpualert_slurm.core.spool import fsync_dir, write_json_atomic

        try:
            made = _makedirs(self.path)
            self.dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            write_json_atomic(self.dir_fd, "run.json", run_record, 0o600)
            self.out_fd = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
                                  | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.dir_fd)
            os.fsync(self.out_fd)
            fsync_dir(self.dir_fd)
            for d in made:  # new directories must be durable entries in their parents too
                pfd = os.open(os.path.dirname(d) or ".", os.O_RDONLY | os.O_DIRECTORY)
                try:
                    fsync_dir(pfd)
                finally:
                    os.close(pfd)
        except OSError as e:
            self.warn("cannot create the log in", e)
            self.close()

    def write(self, data: bytes) -> None:
        if self.out_fd is None:
            return
        try:
            _write_all(self.out_fd, data)
            self.bytes += len(data)
        except OSError as e:
            self.warn("cannot write output.log in", e)
            self._close_out()

    def _close_out(self) -> None:
        if self.out_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.out_fd)
            self.out_fd = None

    def finish(self, record: dict[str, Any]) -> None:
        if self.dir_fd is None:
            return
        from gpualert_slurm.core.spool import write_json_atomic

        try:
            if self.out_fd is not None:
                os.fsync(self.out_fd)
            write_json_atomic(self.dir_fd, "exit.json", record, 0o600)
        except OSError as e:
            self.warn("cannot finish the log in", e)

    def close(self) -> None:
        self._close_out()
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None


def _makedirs(path: str) -> list[str]:
    """mkdir -p with 0700 for what it creates; returns the directories it made."""
    made: list[str] = []
    p = os.path.abspath(path)
    todo = []
    while not os.path.isdir(p):
        todo.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(todo):
        try:
            os.mkdir(d, 0o700)
            made.append(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
    return made


def _strerror(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def _stderr(text: str) -> None:
    with contextlib.suppress(OSError):
        _write_all(2, text.encode(errors="replace"))


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:  # an inherited non-blocking stdout: wait until it has room
            select.select([], [fd], [])
            continue
        view = view[n:]


def _forwarder(pid: int, sigs: set[int]) -> None:
    """Runs in a thread with `sigs` blocked everywhere: takes each one with its siginfo."""
    while True:
        info = signal.sigwaitinfo(sigs)
        if info.si_code == SI_KERNEL:
            continue  # the tty sent it to the whole foreground group: the child has it already
        try:
            os.kill(pid, info.si_signo)
        except ProcessLookupError:
            return


def _spawn(cmd: list[str]) -> tuple[int, int, int]:
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    for fd in (r_out, r_err):
        with contextlib.suppress(OSError):  # fewer wake-ups for chatty commands
            fcntl.fcntl(fd, F_SETPIPE_SZ, BUF)
    try:
        pid = os.posix_spawnp(
            cmd[0], cmd, os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, w_out, 1), (os.POSIX_SPAWN_DUP2, w_err, 2)],
            # The child gets an empty signal mask, and the defaults Python changed for itself.
            setsigmask=(),
            setsigdef=_SIGDEF,
        )
    except BaseException:
        for fd in (r_out, r_err):
            os.close(fd)
        raise
    finally:
        os.close(w_out)
        os.close(w_err)
    return pid, r_out, r_err


def _pump(pid: int, r_out: int, r_err: int, log: RunLog) -> tuple[int, str | None]:
    """Copy the child's output until it exits (and its pipes are emptied, within bounds);
    returns (wait status, a note when output was left uncopied)."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = None
    dest: dict[int, int | None] = {r_out: 1, r_err: 2}
    poller = select.poll()
    for fd in dest:
        poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    status: int | None = None
    exited_at: float | None = None
    note = None
    while dest:
        if exited_at is None:
            timeout = None if pidfd is not None else 100
        else:
            left = FLUSH_MAX_S - (time.monotonic() - exited_at)
            if left <= 0:
                note = "stopped copying: output still held open after the command exited"
                break
            timeout = int(min(FLUSH_IDLE_S, left) * 1000) + 1
        events = poller.poll(timeout)
        if not events and exited_at is not None:
            note = "stopped copying: output still held open after the command exited"
            break
        for fd, _ in events:
            if fd == pidfd:
                poller.unregister(pidfd)
                exited_at = time.monotonic()
                continue
            try:
                data = os.read(fd, BUF)
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                os.close(fd)
                del dest[fd]
                continue
            log.write(data)
            out = dest[fd]
            if out is None:
                continue
            try:
                _write_all(out, data)
            except OSError as e:
                if e.errno == errno.EPIPE:
                    # Our reader went away: close the child's pipe too, so the child sees
                    # SIGPIPE/EPIPE exactly as it would have without us.
                    poller.unregister(fd)
                    os.close(fd)
                    del dest[fd]
                else:
                    # Our stdout/stderr is broken otherwise (full disk, dead tty): keep
                    # logging and keep the child running; it would have had the same error.
                    dest[fd] = None
                    _stderr(f"gpualert: warning: cannot write to fd {out}: {_strerror(e)}; "
                            "the rest of that stream goes to the log only\n")
        if pidfd is None and exited_at is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status, exited_at = st, time.monotonic()
    for fd in dest:
        os.close(fd)
    if pidfd is not None:
        os.close(pidfd)
    if status is None:
        _, status = os.waitpid(pid, 0)
    return status, note


def _classify_line(log_path: str, rec: dict[str, Any]) -> str:
    try:
        from gpualert_slurm.classify import JobFacts, TaskInput, classify
    except Exception as e:
        return f"gpualert: --classify: classifier not available ({e})"
    try:
        task = TaskInput(path=log_path, node=rec["node"], exit_code=rec["exit_code"],
                         signal=rec["signal"], core_dumped=rec["core_dumped"],
                         end_time=rec["end_time"])
        job = JobFacts(exit_code=rec["exit_code"], signal=rec["signal"])
        v = classify([task], job)
        return f"gpualert: diagnosis: {v.cls}: {v.detail or ''} {('- ' + v.hint) if v.hint else ''}"
    except Exception as e:
        return f"gpualert: --classify failed: {type(e).__name__}: {e}"


def run(cmd: list[str], log_dir: str | None = None, name: str | None = None,
        classify: bool = False) -> int:
    path = log_dir or _default_dir(name)
    host = os.uname().nodename
    start = time.time()
    log = RunLog(path)
    log.open({"cmd": cmd, "name": name, "host": host, "pid": os.getpid(), "cwd": os.getcwd(),
              "uid": os.getuid(), "start_time": start,
              "start_time_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(start))})
    # Forward only what our parent did not ignore (under nohup, SIGHUP stays ignored).
    sigs = {s for s in FORWARDED if signal.getsignal(s) != signal.SIG_IGN}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    rec: dict[str, Any] = {"node": host, "step": None, "rank": None, "pid": None,
                           "exit_code": None, "signal": None, "core_dumped": False,
                           "end_time": None, "status": None, "start_time": start, "cmd": cmd}
    try:
        pid, r_out, r_err = _spawn(cmd)
    except OSError as e:
        code = 127 if e.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        msg = f"gpualert: cannot run {cmd[0]!r}: {_strerror(e)}\n"
        _stderr(msg)
        log.write(msg.encode())
        rec.update(exit_code=code, end_time=time.time(), exec_error=msg.strip(), returncode=code)
        log.finish(rec)
        log.close()
        return code
    rec["pid"] = pid
    # The signals stay blocked in this process to the end: the forwarder takes them.
    threading.Thread(target=_forwarder, args=(pid, sigs), daemon=True).start()
    try:
        status, note = _pump(pid, r_out, r_err, log)
    except BaseException:
        log.close()
        raise
    log_ok = log.out_fd is not None
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        code = 128 + sig
        rec.update(signal=sig, core_dumped=os.WCOREDUMP(status))
    else:
        code = os.waitstatus_to_exitcode(status)
        rec["exit_code"] = code
    rec.update(end_time=time.time(), status=status, returncode=code, output_bytes=log.bytes,
               output_note=note, log_complete=log_ok and note is None)
    log.finish(rec)
    log.close()
    if note:
        _stderr(f"gpualert: {note}; log in {path}\n")
    if classify and code != 0:
        _stderr(_classify_line(os.path.join(path, "output.log"), rec) + "\n")
    return code


def main(argv: list[str]) -> int:
    try:
        opts, cmd = parse_args(argv)
    except UsageError as e:
        print(f"gpualert run: {e}\n\n{USAGE}", file=sys.stderr)
        return 2
    if opts.get("help"):
        print(USAGE)
        return 0
    return run(cmd, opts["log_dir"], opts["name"], opts["classify"])
