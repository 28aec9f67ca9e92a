"""`gpualert web [--port N]`: the web pages of the caller's jobs (gpualert_slurm/web/) on
http://127.0.0.1:N/, served as the user who runs it, for a login node (an SSH tunnel from the
laptop) where no Open OnDemand is.

Loopback only, never root: the pages show what the caller can read, so they must reach no one
else. Every user of the login node can connect to 127.0.0.1 too: each request must carry the
secret token in the link this command prints (then a cookie; web.app.TokenGate), which only the
invoking user sees. Root would read every user's job dir: refused (docs/SECURITY.md, "The web
pages").
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import secrets
import socket
import sys
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _V6Server(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        sys.stderr.write(f"gpualert web: {self.address_string()} {format % args}\n")


def loopback(host: str) -> bool:
    """Whether `host` is a loopback address (names are not resolved: 127.0.0.1 or ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gpualert web",
                                description="serve the web pages of your jobs on 127.0.0.1")
    p.add_argument("--port", type=int, default=0,
                   help="the port (default: a free one, printed)")
    p.add_argument("--bind", default="127.0.0.1",
                   help="a loopback address: 127.0.0.1 (default) or ::1; nothing else")
    a = p.parse_args(argv)
    if os.geteuid() == 0:
        print("gpualert web: refused as root: root would read every user's jobs. Run it as "
              "yourself (each user serves their own pages)", file=sys.stderr)
        return 2
    if not loopback(a.bind):
        print(f"gpualert web: refused to listen on {a.bind!r}: only 127.0.0.1 or ::1 (reach it "
              "through `ssh -L`, or use the Open OnDemand app)", file=sys.stderr)
        return 2
    if not 0 <= a.port <= 65535:
        print(f"gpualert web: bad port {a.port}", file=sys.stderr)
        return 2
    from gpualert_slurm.core.config import ConfigError, load_config
    from gpualert_slurm.web import make_app
    from gpualert_slurm.web.app import TokenGate

    try:
        token = secrets.token_urlsafe(24)
        app = TokenGate(make_app(load_config()), token)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    server_class = _V6Server if ":" in a.bind else _Server
    with make_server(a.bind, a.port, app, server_class=server_class,
                     handler_class=_Quiet) as httpd:
        host, port = httpd.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"gpualert web: http://{shown}:{port}/?token={token} (Ctrl-C stops it)",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            httpd.serve_forever()
    return 0
