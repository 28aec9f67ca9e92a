"""A local object-store endpoint that misbehaves for real, for storage_io cases.

Modes: stall (accept, never answer), reset (read the request, then RST), partial (a 200 header
promising 1 MiB, `body` bytes, close), partial-stall (the same, then hold the connection),
partial-close (the same, close after 0.2 s), close (close before reading), eof (read, close).
Each connection is served on its own thread, so a held one blocks nothing.
"""

from __future__ import annotations

import socket
import threading
import time

HEADER = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nContent-Length: 1048576\r\n\r\n"


class Server:
    def __init__(self, mode: str, body: int = 1024) -> None:
        self.mode, self.body = mode, body
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)  # kept: a stalled server never closes either
            threading.Thread(target=self.handle, args=(c,), daemon=True).start()

    def handle(self, c: socket.socket) -> None:
        c.settimeout(5)
        try:
            if self.mode == "close":
                c.close()
                return
            c.recv(65536)
            if self.mode == "reset":
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                c.close()
            elif self.mode.startswith("partial"):
                c.sendall(HEADER + b"\0" * self.body)
                if self.mode == "partial-close":
                    time.sleep(0.2)
                if self.mode != "partial-stall":
                    c.close()
            elif self.mode == "eof":
                c.close()
            # stall: keep the connection open and never answer
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()
