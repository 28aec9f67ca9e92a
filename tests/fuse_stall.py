"""A passthrough FUSE filesystem that a test can stall: SIGSTOP this process and every request
on the mount (open, write, rename, ...) waits until SIGCONT, as on a hung NFS or Lustre mount.

    python fuse_stall.py BACKING MOUNTPOINT

Runs in the foreground (the test owns the process), as root, with `allow_other` (the job's
user uses the mount) and `default_permissions` (the kernel checks modes and owners from the
backing files' attributes). Files and directories are created with the caller's uid/gid, as
a local filesystem would, so the mount behaves like the spool it stands in for. Uses fusepy
over Debian's libfuse2 (scripts/install.sh installs both).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

try:
    from fuse import FUSE, FuseOSError, Operations, fuse_get_context
except ImportError:  # Debian's python3-fusepy names the module fusepy (the v2 guest)
    from fusepy import FUSE, FuseOSError, Operations, fuse_get_context


class Passthrough(Operations):  # type: ignore[misc]
    """Every operation on MOUNTPOINT/x is done on BACKING/x."""

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)

    def _p(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _own(self, full: str, follow: bool = True) -> None:
        uid, gid, _pid = fuse_get_context()
        os.chown(full, uid, gid, follow_symlinks=follow)

    def __call__(self, op: str, *args: Any) -> Any:
        try:
            return super().__call__(op, *args)
        except OSError as e:  # report the backing file's errno, not EIO
            raise FuseOSError(e.errno or errno.EIO) from e

    # metadata
    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        st = os.lstat(self._p(path))
        return {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid",
                                           "st_size", "st_atime", "st_mtime", "st_ctime")}

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._p(path), amode):
            raise FuseOSError(errno.EACCES)

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._p(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._p(path))

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._p(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize",
                                           "f_favail", "f_ffree", "f_files", "f_flag",
                                           "f_frsize", "f_namemax")}

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._p(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._p(path), uid, gid, follow_symlinks=False)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        os.utime(self._p(path), times, follow_symlinks=False)

    def truncate(self, path: str, length: int, fh: Any = None) -> None:
        os.truncate(self._p(path), length)

    # names
    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._p(path), mode)
        self._own(self._p(path))

    def mknod(self, path: str, mode: int, dev: int) -> None:
        os.mknod(self._p(path), mode, dev)
        self._own(self._p(path))

    def symlink(self, target: str, source: str) -> None:
        os.symlink(source, self._p(target))
        self._own(self._p(target), follow=False)

    def link(self, target: str, source: str) -> None:
        os.link(self._p(source), self._p(target))

    def rename(self, old: str, new: str) -> None:
        os.rename(self._p(old), self._p(new))

    def unlink(self, path: str) -> None:
        os.unlink(self._p(path))

    def rmdir(self, path: str) -> None:
        os.rmdir(self._p(path))

    # data (raw_fi: the open flags, O_APPEND included, reach the backing file)
    def create(self, path: str, mode: int, fi: Any) -> int:
        full = self._p(path)
        fi.fh = os.open(full, fi.flags | os.O_CREAT, mode)
        self._own(full)
        return 0

    def open(self, path: str, fi: Any) -> int:
        fi.fh = os.open(self._p(path), fi.flags)
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        return os.pread(fi.fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        return os.pwrite(fi.fh, data, offset)

    def flush(self, path: str, fi: Any) -> None:
        return None

    def fsync(self, path: str, datasync: int, fi: Any) -> None:
        (os.fdatasync if datasync else os.fsync)(fi.fh)

    def release(self, path: str, fi: Any) -> None:
        os.close(fi.fh)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} BACKING MOUNTPOINT", file=sys.stderr)
        return 2
    FUSE(Passthrough(argv[1]), argv[2], foreground=True, allow_other=True,
         default_permissions=True, big_writes=True, raw_fi=True, nothreads=False,
         fsname="gpualert-stall")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
