"""What every hook shares: its own log (root-only file in the spool, syslog, stderr) and a
watchdog that ends the hook, still with status 0, when it runs past its time bound."""

from __future__ import annotations

import contextlib
import os
import sys
import syslog
import threading
import time

from gpualert_slurm.core.config import Config, ConfigError, load_config
from gpualert_slurm.core.spool import hooks_log

DEFAULT_TIMEOUT_S = 20.0
HOOKS_LOG_MAX = 16 << 20   # then the log moves to .1 and starts again: two files at most


def shim_bound_s() -> float:
    """Our own bound must end before the shim's `timeout` (GPUALERT_HOOK_TIMEOUT) kills us
    without a log line: keep a margin of 3 s."""
    try:
        shim = float(os.environ.get("GPUALERT_HOOK_TIMEOUT", "25"))
    except ValueError:
        shim = 25.0
    return max(1.0, shim - 3.0)


class HookLog:
    """One line per event. The spool file is opened per line with O_NOFOLLOW|O_APPEND: the
    spool root is root's, but a hook must not be the one that follows a planted symlink."""

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.spool: str | None = None
        syslog.openlog("gpualert", syslog.LOG_PID, syslog.LOG_DAEMON)

    def set_spool(self, spool: str) -> None:
        self.spool = spool

    def _emit(self, level: int, tag: str, msg: str) -> None:
        from gpualert_slurm.core.termsafe import escape

        # Messages quote job data (names, paths, errors): one line each, and no control
        # character of it reaches the admin who runs `tail` on this log, or the journal.
        line = f"{self.hook}: {escape(msg, keep_newlines=False)}"
        with contextlib.suppress(Exception):  # no syslog: the other two destinations remain
            syslog.syslog(level, line)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        full = f"{stamp} {os.uname().nodename} {tag} {line}\n"
        try:
            sys.stderr.write(f"gpualert {line}\n")
            sys.stderr.flush()
        except Exception:
            pass
        if self.spool:
            try:
                fd = os.open(hooks_log(self.spool),
                             os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, full.encode(errors="replace"))
                    if os.fstat(fd).st_size > HOOKS_LOG_MAX:
                        # Every hook of every job writes here: without a bound it only grows.
                        # A rename by two hooks at once loses at most the older file's lines.
                        path = hooks_log(self.spool)
                        os.replace(path, path + ".1")
                finally:
                    os.close(fd)
            except OSError:
                pass

    def info(self, msg: str) -> None:
        self._emit(syslog.LOG_INFO, "INFO", msg)

    def error(self, msg: str) -> None:
        self._emit(syslog.LOG_ERR, "ERROR", msg)


class Watchdog:
    """A daemon thread that, past the deadline, logs and calls os._exit(0). A thread (not
    SIGALRM) because NVML or a hung NFS call blocks in C where Python signal handlers wait."""

    def __init__(self, log: HookLog, timeout_s: float) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._timeout_s = timeout_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def rearm(self, timeout_s: float) -> None:
        """A new bound, counted from the hook's start (not from now)."""
        with self._lock:
            self._timeout_s = timeout_s

    def stop(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        while True:
            with self._lock:
                left = self._start + self._timeout_s - time.monotonic()
            if left <= 0:
                break
            if self._done.wait(min(left, 1.0)):
                return
        self.log.error(f"gave up after {self._timeout_s:g} s (hook_timeout_s); exiting 0")
        os._exit(0)


def load_config_logged(log: HookLog) -> Config | None:
    """The config, or None (logged) when it is broken: the hook then does nothing but log."""
    try:
        return load_config()
    except ConfigError as e:
        log.error(f"{e}; gpualert does nothing for this job")
        return None
