"""Family `storage`: storage timeouts and broken reads against a real local server.

The server listens on 127.0.0.1 and, per mode, accepts and never answers (`stall`), answers
with a connection reset (`reset`), or sends headers and part of the body, then stalls or
closes (`partial-stall`, `partial-close`). The client is a real "training" program using
urllib / http.client / plain sockets with timeouts, alone, with retries, or in DataLoader workers.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from common import prog, run_parallel, shown, single

PREFIXES = ("storage-",)
MODES = ["stall", "stall", "reset", "partial-stall", "partial-close"]


class Server:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        self.held.append(conn)  # kept open: a stalled server never closes either
        if self.mode == "stall":
            return
        conn.settimeout(5)
        try:
            conn.recv(4096)
        except OSError:
            return
        if self.mode == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                     b"Content-Length: 1048576\r\n\r\n" + b"\0" * 20000)
        if self.mode == "partial-close":
            time.sleep(0.2)
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def _case(i: int, mode: str):
    case_id = f"storage-{mode}-{i:02d}"

    def job() -> dict:
        srv = Server(mode)
        try:
            cmd = prog("storagefail", i, case_id, srv.port)
            lab = single(case_id, "storage_io", cmd,
                         shown=shown(cmd) + f" (server on 127.0.0.1 that does: {mode})",
                         timeout=90)
        finally:
            srv.close()
        return lab
    job.case_id = case_id
    return job


def cases() -> list:
    return [_case(i, MODES[i % len(MODES)]) for i in range(33)]


def generate(workers: int = 2) -> list[dict]:
    return [lab for lab in run_parallel(cases(), workers=workers)
            if lab and lab["exit_code"] != 0]
