"""Root's own state under <spool>/.gpualert/ (array summaries, rate caps, pending reports):
directories only root may own, and JSON state files read and written under a lock."""

from __future__ import annotations

import fcntl
import os

from gpualert_slurm.core.config import Config
from gpualert_slurm.core.spool import SpoolError, open_dir, read_json_nofollow, write_json_atomic

STATE_DIR = ".gpualert"  # <spool>/.gpualert: root's own state (array summaries, rate caps)


def state_dir(cfg: Config, sub: str) -> str:
    """<spool>/.gpualert/<sub>, root's, 0700 (the spool root is root's 0755, checked)."""
    path = os.path.join(cfg.spool, STATE_DIR, sub)
    os.makedirs(path, mode=0o700, exist_ok=True)
    for p in (os.path.dirname(path), path):
        st = os.lstat(p)
        if st.st_uid != 0 or not os.path.isdir(p) or os.path.islink(p):
            raise SpoolError(f"{p}: not root's own directory: refused")
    return path


class Locked:
    """flock on <dir>/<name>.lock and a JSON state file <dir>/<name>.json beside it."""

    def __init__(self, directory: str, name: str) -> None:
        self.dir, self.name = directory, name

    def __enter__(self) -> Locked:
        self.fd = os.open(os.path.join(self.dir, self.name + ".lock"),
                          os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.dfd = open_dir(self.dir)
        try:
            self.state = read_json_nofollow(self.name + ".json", self.dfd, owners=(0,))
        except (FileNotFoundError, SpoolError):
            self.state = {}
        return self

    def save(self) -> None:
        write_json_atomic(self.dfd, self.name + ".json", self.state, 0o600)

    def __exit__(self, *exc: object) -> None:
        os.close(self.dfd)
        os.close(self.fd)
