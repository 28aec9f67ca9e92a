"""Launcher of the f9t- tuning cases: readers that meet a file cut short (msgpack, SciPy's
MAT reader, np.load) and a local HTTP server answering 404 for a download step (wget, curl).

Usage: f9_tools.py MODE PATH [ARG...]
  msgpack_cut PATH         write a replay buffer with msgpack, cut it, unpackb it
  msgpack_stream_cut PATH  the same through a streaming Unpacker
  msgpack_appended PATH    a second state appended to the file, unpackb reads it
  mat_cut PATH N           scipy.io.savemat an embedding table, keep N bytes, loadmat it
  mat4_cut PATH            the same as a MAT v4 file cut in its matrix data
  npy_empty PATH           np.load of a feature file its writer left empty
  http404 URLPATH CMD...   serve 404 on 127.0.0.1, run CMD with {URL} replaced (exec's status)
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading


def cut(path: str, keep: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def msgpack_cut(path: str, appended: bool = False, stream: bool = False) -> None:
    import msgpack
    buf = {"obs": [[float(i), float(i) * 0.5] for i in range(4000)], "step": 120000}
    with open(path, "wb") as f:
        f.write(msgpack.packb(buf))
    if appended:  # a second writer appended its state instead of replacing the file
        with open(path, "ab") as f:
            f.write(msgpack.packb({"step": 120001}))
    else:
        cut(path, os.path.getsize(path) * 2 // 3)
    print(f"loading replay buffer {path}", flush=True)
    with open(path, "rb") as f:
        if stream:
            state = msgpack.Unpacker(f, raw=False).unpack()
        else:
            state = msgpack.unpackb(f.read(), raw=False)
    print("resumed at step", state["step"])


def mat_cut(path: str, keep: int, fmt: str = "5") -> None:
    import numpy as np
    import scipy.io as sio
    sio.savemat(path, {"emb": np.random.default_rng(0).standard_normal((300, 64))}, format=fmt)
    cut(path, keep if keep >= 0 else os.path.getsize(path) // 2)
    print(f"loading embeddings from {path}", flush=True)
    emb = sio.loadmat(path)["emb"]
    print("embeddings", emb.shape)


def npy_empty(path: str) -> None:
    import numpy as np
    open(path, "wb").close()  # the feature writer was killed before it wrote anything
    print(f"loading features {path}", flush=True)
    feats = np.load(path, allow_pickle=True)
    print("features", feats.shape)


class NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_error(404, "Not Found")

    def log_message(self, *args: object) -> None:
        pass


def http404(urlpath: str, cmd: list[str]) -> None:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/{urlpath.lstrip('/')}"
    rc = subprocess.call([a.replace("{URL}", url) for a in cmd])
    srv.shutdown()
    sys.exit(rc)


def main() -> None:
    mode, path, *rest = sys.argv[1:]
    if mode == "msgpack_cut":
        msgpack_cut(path)
    elif mode == "msgpack_stream_cut":
        msgpack_cut(path, stream=True)
    elif mode == "msgpack_appended":
        msgpack_cut(path, appended=True)
    elif mode == "mat_cut":
        mat_cut(path, int(rest[0]))
    elif mode == "mat4_cut":
        mat_cut(path, -1, fmt="4")
    elif mode == "npy_empty":
        npy_empty(path)
    elif mode == "http404":
        http404(path, rest)
    else:
        raise SystemExit(f"f9_tools.py: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
