"""`gpualert flush`: send what waits in the outbox (run it from a systemd timer or cron on the
host that runs EpilogSlurmctld; etc/systemd/gpualert-flush.timer). Exit status 0 unless the
config or the outbox cannot be read; one line of counts, then any problems on stderr."""

from __future__ import annotations

import argparse
import sys
import time

from gpualert_slurm.core.config import ConfigError, load_config
from gpualert_slurm.notify.core import flush, requeue_quarantined
from gpualert_slurm.notify.outbox import Outbox, OutboxError


def _list(path: str) -> int:
    try:
        ob = Outbox(path).open(create=False)
    except OutboxError as e:
        print(f"gpualert flush: {e}", file=sys.stderr)
        return 1
    with ob:
        for quarantined in (False, True):
            for entry_id in ob.ids(quarantined):
                try:
                    st = ob.read_state(entry_id, quarantined)
                except (OSError, ValueError) as e:
                    print(f"{entry_id}: unreadable state: {e}")
                    continue
                age = (time.time() - float(st.get("created", time.time()))) / 60
                where = "quarantined" if quarantined else "waiting"
                print(f"{where:<11} job {st.get('job_id')} {st.get('channel')} "
                      f"attempts={st.get('attempts', 0)} age={age:.0f}m "
                      f"{ob.entry_path(entry_id, quarantined)}: {st.get('last_error') or '-'}")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert flush", description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="config file (default: $GPUALERT_CONFIG or "
                    "/etc/gpualert/gpualert.yaml)")
    ap.add_argument("--all", action="store_true", help="also send what is not due yet "
                    "(after fixing the relay)")
    ap.add_argument("--requeue", action="store_true", help="move quarantined messages back to "
                    "the outbox first (after fixing what the quarantine reasons say)")
    ap.add_argument("--list", action="store_true", help="list waiting and quarantined "
                    "messages with their last error; send nothing")
    ap.add_argument("--timeout", type=float, default=3000.0,
                    help="stop after this many seconds (default 3000)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    if args.list:
        return _list(cfg.outbox)
    if args.requeue:
        try:
            print(f"gpualert flush: requeued {requeue_quarantined(cfg)} quarantined message(s)")
        except (OSError, ValueError) as e:
            print(f"gpualert flush: cannot requeue: {e}", file=sys.stderr)
            return 1
    res = flush(cfg, everything=args.all or args.requeue, timeout_s=args.timeout)
    print(res.line())
    for err in res.errors:
        print(f"gpualert flush: {err}", file=sys.stderr)
    return 1 if res.errors and not (res.sent or res.waiting or res.quarantined) else 0
