"""A local object-store endpoint that misbehaves for real, for storage_io cases.

Modes: stall (accept, read the request, never answer), reset (read, then RST), partial (a 200
header promising 1 MiB, 1 KiB of body, close), close (close before reading), eof (read, close).
"""

from __future__ import annotations

import socket
import threading


class Server:
    def __init__(self, mode: str, body: int = 1024) -> None:
        self.mode, self.body = mode, body
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
                              b"Content-Length: 1048576\r\n\r\n" + b"\0" * self.body)
                    c.close()
                elif self.mode in ("close", "eof"):
                    c.close()
                # stall: keep the connection open and never answer
            except OSError:
                pass

    def close(self) -> None:
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()
