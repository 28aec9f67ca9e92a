#!/usr/bin/env python3
"""Delivery cost: gpualert's submit() (outbox write + fsync, send, removal) against a bare
smtplib send of the same message to the same local SMTP sink, in one run.

1. submit -> accepted latency, p50/p95 over N messages, and the ratio to raw smtplib.
2. Outbox throughput: N messages queued while the relay is down (submit returns "queued"),
   then `flush` sending them once it is back: messages per second each way.
Exits non-zero only on error. Needs no cluster (the sink is docker/slurm-cluster/smtp_sink.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import smtplib
import socket
import statistics
import sys
import tempfile
import time
from email import policy
from email.message import EmailMessage
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpualert_slurm.core.config import parse_config  # noqa: E402
from gpualert_slurm.notify import flush, submit  # noqa: E402


def load_sink():
    spec = importlib.util.spec_from_file_location(
        "smtp_sink", REPO / "docker" / "slurm-cluster" / "smtp_sink.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SmtpSink


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def message(i: int, body_kb: int) -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = f"[gpualert] FAILED job {i} (bench): CUDA out of memory on n2, rank 5"
    msg["From"] = "gpualert@bench.example.org"
    msg["To"] = "alice@lab.example.org"
    line = "step 1234 loss=nan lr=3e-4 tokens/s=98765 rank=5 node=n2\n"
    text = line * max(1, body_kb * 1024 // len(line))
    msg.set_content(text)
    msg.add_alternative(f"<html><body><pre>{text}</pre></body></html>", subtype="html")
    return msg


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100, help="messages per measurement (default 100)")
    ap.add_argument("--kb", type=int, default=20, help="size of each message's text (KiB)")
    args, _ = ap.parse_known_args()
    sink_cls = load_sink()
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        spool = Path(tmp) / "spool"
        spool.mkdir(mode=0o755)
        sink = sink_cls(Path(tmp) / "mail", port=0).start()
        try:
            cfg = parse_config({"spool": str(spool),
                                "mail": {"relay": f"127.0.0.1:{sink.port}"},
                                "notify": {"tries": 1}}, "bench")
            msgs = [message(i, args.kb) for i in range(args.n)]
            raw_data = [m.as_bytes(policy=policy.SMTP) for m in msgs]  # CRLF, as on the wire

            # baseline: one smtplib connection per message, as submit() does
            raw: list[float] = []
            for data in raw_data:
                t0 = time.perf_counter()
                with smtplib.SMTP("127.0.0.1", sink.port, timeout=10) as s:
                    s.sendmail("gpualert@bench.example.org", ["alice@lab.example.org"], data)
                raw.append(time.perf_counter() - t0)

            ours: list[float] = []
            for i, m in enumerate(msgs):
                t0 = time.perf_counter()
                d = submit(m, cfg=cfg, job_id=str(i))
                ours.append(time.perf_counter() - t0)
                if d.status != "sent":
                    print(f"bench_notify: submit {i}: {d.status}: {d.reason}", file=sys.stderr)
                    return 1
            got = len(sink.messages())
            if got != 2 * args.n:
                print(f"bench_notify: sink has {got} messages, expected {2 * args.n}",
                      file=sys.stderr)
                return 1

            # outbox throughput: relay down, then back
            down = parse_config({"spool": str(spool),
                                 "mail": {"relay": f"127.0.0.1:{free_port()}"},
                                 "notify": {"tries": 1}}, "bench")
            t0 = time.perf_counter()
            for i, m in enumerate(msgs):
                if submit(m, cfg=down, job_id=f"q{i}").status != "queued":
                    print("bench_notify: expected queued", file=sys.stderr)
                    return 1
            queue_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = flush(cfg, everything=True)
            flush_s = time.perf_counter() - t0
            if res.sent != args.n:
                print(f"bench_notify: flush sent {res.sent} of {args.n}: {res}",
                      file=sys.stderr)
                return 1
        finally:
            sink.stop()
    size = len(raw_data[0]) / 1024
    print(f"messages: {args.n} x {size:.0f} KiB, local aiosmtpd sink, fsync on {os.uname()[1]}")
    print(f"raw smtplib send        p50 {pct(raw, 50) * 1e3:7.2f} ms  p95 "
          f"{pct(raw, 95) * 1e3:7.2f} ms")
    print(f"submit -> accepted      p50 {pct(ours, 50) * 1e3:7.2f} ms  p95 "
          f"{pct(ours, 95) * 1e3:7.2f} ms")
    print(f"ratio submit/raw        p50 {pct(ours, 50) / pct(raw, 50):5.2f}x  mean "
          f"{statistics.mean(ours) / statistics.mean(raw):5.2f}x")
    print(f"queue while relay down  {args.n / queue_s:7.1f} msg/s "
          f"({queue_s / args.n * 1e3:.2f} ms each, outbox write + refused connect)")
    print(f"flush when relay back   {args.n / flush_s:7.1f} msg/s "
          f"(raw smtplib: {1 / statistics.mean(raw):.1f} msg/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
