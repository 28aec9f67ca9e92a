"""`gpualert metrics`: Prometheus metrics in node_exporter's textfile-collector format, from the
spool (each attempt's verdict.json), the outbox and the recovery audit log. Run it from a timer
(etc/systemd/gpualert-metrics.timer) on one host that mounts the spool; node_exporter serves
the file (--collector.textfile.directory). The file is replaced atomically (a temporary file
in the same directory, renamed), so node_exporter never reads half of it.

Only root's records count: a verdict.json is read as root reads a user's directory (fd-relative,
no link followed, non-blocking, size-capped, root's file about this job and attempt:
core.verdict.read_run); the job's own files are never read. Node labels come from Slurm's facts
(the verdict's "trusted" block: the nodes Slurm says ran the attempt), and a node counts as
having a hardware verdict only where root's facts from that node back it (a driver Xid line in
Slurm's window, NVML counters that moved: provenance.backing), never from what the job printed.
Exit status 0 when the file was written (a partial scan says so in gpualert_metrics_complete),
1 when it could not be, or the config is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.core.config import Config, ConfigError, load_config
from gpualert_slurm.core.verdict import VerdictRecord

DEFAULT_OUTPUT = "/var/lib/prometheus/node-exporter/gpualert.prom"
AUDIT_MAX_BYTES = 256 * 1024**2  # read whole (counters), up to this; root's own file
HARDWARE_CLASSES = ("gpu_hardware",)
_JOB_RE = re.compile(r"^[0-9]{1,20}$")
# verdict.json's report.status (hooks.job_epilog.delivery.deliver, notify.submit) -> the label;
# anything else (not sent, error) is "failed"
REPORT_STATUS = {"sent": "sent", "queued": "waiting", "quarantined": "quarantined",
                 "failed": "failed", "in the array summary": "in_array_summary"}


@dataclass
class Scan:
    """What one pass found; every counter keyed by its label values."""

    failures: Counter[tuple[str, str]] = field(default_factory=Counter)  # (class, partition)
    failures_by_node: Counter[tuple[str, str]] = field(default_factory=Counter)  # (class, node)
    hardware: Counter[str] = field(default_factory=Counter)  # node -> backed hw verdicts
    reports: Counter[str] = field(default_factory=Counter)  # report status in verdict.json
    outbox: Counter[tuple[str, str]] = field(default_factory=Counter)  # (state, channel)
    outbox_oldest: dict[str, float] = field(default_factory=dict)  # state -> created (s)
    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (action, mode)
    results: Counter[tuple[str, str]] = field(default_factory=Counter)  # (action, outcome)
    breakers: dict[str, float] = field(default_factory=dict)  # partition -> opened (0: closed)
    errors: Counter[str] = field(default_factory=Counter)  # source -> unreadable records
    job_dirs: int = 0
    verdicts: int = 0
    complete: bool = True


# ---- the spool -----------------------------------------------------------------------------

def _job_ids(spool: str) -> list[str]:
    """The spool's job directories (digits only: the Prolog's names), oldest id first."""
    with os.scandir(spool) as it:
        names = [e.name for e in it if _JOB_RE.match(e.name)]
    return sorted(names, key=int)


def _backing() -> Any:
    """provenance.backing (the Slurm or root fact that backs a class on a node), or None where
    this installation has no provenance model: then no node counts as hardware-backed."""
    try:
        from gpualert_slurm.core.provenance import backing
    except ImportError:
        return None
    return backing


def count_verdict(scan: Scan, v: VerdictRecord, outbox_ids: set[str]) -> None:
    """Add one attempt's verdict.json (root's, checked by core.verdict) to the scan."""
    scan.verdicts += 1
    cls = v.cause.klass
    trusted = v.trusted or {}
    sl = trusted.get("slurm") or {}
    partition = str(sl.get("partition") or "unknown")
    nodes = [str(n) for n in sl.get("nodes") or [] if isinstance(n, str)]
    if v.failed_or_silent:
        scan.failures[(cls, partition)] += 1
        for n in nodes:
            scan.failures_by_node[(cls, n)] += 1
    if cls in HARDWARE_CLASSES:
        backing = _backing()
        for n in nodes:
            if backing is not None and backing(trusted, n, cls) is not None:
                scan.hardware[n] += 1
    rep = v.report
    if rep is not None:
        status = REPORT_STATUS.get(str(rep.get("status")), "failed")
        if status == "waiting":
            # sent later by `gpualert flush` once its outbox entry is gone (not quarantined:
            # quarantine keeps the entry's id)
            entry = os.path.basename(str(rep.get("outbox") or ""))
            entry = entry[:-4] if entry.endswith(".eml") else entry
            if entry and entry not in outbox_ids:
                status = "sent"
        scan.reports[status] += 1


def scan_spool(cfg: Config, scan: Scan, outbox_ids: set[str], deadline: float) -> None:
    from gpualert_slurm.core.spool import SpoolError, list_attempts
    from gpualert_slurm.core.verdict import read_run

    try:
        ids = _job_ids(cfg.spool)
    except OSError:
        scan.errors["spool"] += 1
        scan.complete = False
        return
    for jobid in ids:
        if time.monotonic() >= deadline:
            scan.complete = False
            return
        scan.job_dirs += 1
        # attempt 0's verdict lies in the job dir itself, whatever else is there
        for attempt in sorted({0, *list_attempts(os.path.join(cfg.spool, jobid))}):
            try:
                v = read_run(cfg.spool, jobid, attempt)
            except FileNotFoundError:
                continue  # running, or not monitored to the end: no verdict yet
            except (OSError, SpoolError, ValueError):
                scan.errors["verdict"] += 1
                continue
            count_verdict(scan, v, outbox_ids)


# ---- the outbox and the audit log -----------------------------------------------------------

MAX_STATES = 10000  # outbox states read for their channel; beyond, the id's tag says it


def _channel(ob: Any, entry_id: str, quarantined: bool, n: int) -> str:
    """The entry's channel from its state (root's own file); the id's tag (<ns>-<job>-
    <channel tag>-<hex>, '-' made '_') when unreadable or past MAX_STATES."""
    if n < MAX_STATES:
        try:
            ch = ob.read_state(entry_id, quarantined).get("channel")
            if isinstance(ch, str) and ch:
                return ch
        except (OSError, ValueError):
            pass
    parts = entry_id.split("-")
    return "-".join(parts[2:-1]) or "unknown"


def scan_outbox(cfg: Config, scan: Scan) -> set[str]:
    """Waiting and quarantined messages by channel; returns the ids of both."""
    from gpualert_slurm.notify.outbox import Outbox, OutboxError

    ids: set[str] = set()
    try:
        ob = Outbox(cfg.outbox).open(create=False)
    except OutboxError as e:
        if e.errno != 2:  # no outbox yet: nothing was ever queued
            scan.errors["outbox"] += 1
        return ids
    with ob:
        for state, quarantined in (("waiting", False), ("quarantined", True)):
            try:
                found = ob.ids(quarantined)
            except OSError:
                scan.errors["outbox"] += 1
                continue
            for n, entry_id in enumerate(found):
                scan.outbox[(state, _channel(ob, entry_id, quarantined, n))] += 1
                ids.add(entry_id)
            if found:
                scan.outbox_oldest[state] = int(found[0].split("-", 1)[0]) / 1e9
    return ids


def _read_audit(path: str) -> Iterable[dict[str, Any]]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > AUDIT_MAX_BYTES:
            f.seek(size - AUDIT_MAX_BYTES)
            f.readline()  # a partial first line
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec


def scan_audit(cfg: Config, scan: Scan) -> None:
    from gpualert_slurm.recovery.audit import audit_path

    try:
        records = list(_read_audit(audit_path(cfg)))
    except FileNotFoundError:
        return
    except OSError:
        scan.errors["audit"] += 1
        return
    for r in records:
        ev = r.get("event")
        if ev == "decision":
            mode = str(r.get("mode") or "unknown")
            # what it did (action mode) or would have done (monitor mode); none: no action
            acts = r.get("planned") if mode == "action" else r.get("would")
            names = sorted({str(a.get("action")) for a in acts or [] if isinstance(a, dict)})
            for a in names or ["none"]:
                scan.decisions[(a, mode)] += 1
        elif ev == "result":
            scan.results[(str(r.get("action")), str(r.get("outcome")))] += 1
        elif ev == "breaker" and r.get("partition") is not None:
            p = str(r.get("partition"))
            parts = [q for q in scan.breakers if p == "*"] if p == "*" else [p]
            for q in parts or [p]:
                scan.breakers[q] = float(r.get("time") or 0) if r.get("state") == "open" else 0.0


# ---- the text format -----------------------------------------------------------------------

def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{_esc(str(v))}"' for n, v in zip(names, values, strict=True)) \
        + "}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, text: str, labels: tuple[str, ...],
               samples: Iterable[tuple[tuple[str, ...], float]]) -> None:
        self.lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for values, value in sorted(samples):
            self.lines.append(f"{name}{_labels(labels, values)} {_num(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(scan: Scan, cfg: Config, now: float, duration_s: float) -> str:
    w = _Writer()
    w.family("gpualert_failed_jobs", "gauge", "Failed job attempts whose verdict is in the "
             "spool, by class and partition (Slurm's).", ("class", "partition"),
             ((k, v) for k, v in scan.failures.items()))
    w.family("gpualert_failed_jobs_by_node", "gauge", "Failed job attempts in the spool by "
             "class and node, for every node Slurm says ran the attempt.", ("class", "node"),
             ((k, v) for k, v in scan.failures_by_node.items()))
    w.family("gpualert_reports", "gauge", "Reports of the jobs in the spool by what became of "
             "them (sent: by the job epilog or a later flush).", ("status",),
             (((k,), v) for k, v in scan.reports.items()))
    w.family("gpualert_outbox_messages", "gauge", "Messages in the outbox: waiting to be sent "
             "or quarantined, by channel.", ("state", "channel"),
             ((k, v) for k, v in scan.outbox.items()))
    w.family("gpualert_outbox_oldest_age_seconds", "gauge", "Age of the oldest waiting or "
             "quarantined message.", ("state",),
             (((k,), max(0.0, now - t)) for k, t in scan.outbox_oldest.items()))
    w.family("gpualert_recovery_decisions_total", "counter", "Recovery decisions in the audit "
             "log by action (done in action mode, would-do in monitor mode; none) and mode.",
             ("action", "mode"), ((k, v) for k, v in scan.decisions.items()))
    w.family("gpualert_recovery_action_results_total", "counter", "Results of recovery "
             "actions carried out, by action and outcome.", ("action", "outcome"),
             ((k, v) for k, v in scan.results.items()))
    w.family("gpualert_breaker_open", "gauge", "1 while a partition's recovery circuit "
             "breaker is open (no drains until `gpualert resume --breaker`).", ("partition",),
             (((p,), 1 if t else 0) for p, t in scan.breakers.items()))
    w.family("gpualert_breaker_opened_timestamp_seconds", "gauge", "When an open breaker "
             "opened.", ("partition",), (((p,), t) for p, t in scan.breakers.items() if t))
    w.family("gpualert_node_hardware_verdicts", "gauge", "Hardware verdicts (gpu_hardware) "
             "in the spool that root's facts from the node back (kernel Xid in Slurm's window, "
             "NVML counters).", ("node",), (((n,), c) for n, c in scan.hardware.items()))
    limit = cfg.recovery.escalate_after
    repeated = [n for n, c in scan.hardware.items() if c >= limit]
    w.family("gpualert_node_repeated_hardware", "gauge", f"1 for a node with at least "
             f"{limit} (recovery.escalate_after) backed hardware verdicts in the spool.",
             ("node",), (((n,), 1) for n in repeated))
    w.family("gpualert_nodes_repeated_hardware", "gauge", "Nodes with repeated backed "
             "hardware verdicts.", (), [((), len(repeated))])
    w.family("gpualert_metrics_read_errors", "gauge", "Records this pass could not read (a "
             "refused or broken file), by source.", ("source",),
             (((k,), v) for k, v in scan.errors.items()))
    w.family("gpualert_metrics_job_dirs", "gauge", "Job directories scanned.", (),
             [((), scan.job_dirs)])
    w.family("gpualert_metrics_verdicts", "gauge", "Verdicts read.", (), [((), scan.verdicts)])
    w.family("gpualert_metrics_complete", "gauge", "1 when the pass read everything within "
             "its time limit.", (), [((), 1 if scan.complete else 0)])
    w.family("gpualert_metrics_duration_seconds", "gauge", "How long the pass took.", (),
             [((), round(duration_s, 3))])
    w.family("gpualert_metrics_last_run_timestamp_seconds", "gauge", "When the pass ran.", (),
             [((), round(now, 3))])
    return w.text()


def collect(cfg: Config, time_limit_s: float = 90.0) -> tuple[Scan, str]:
    """One pass: (what it found, the text to write)."""
    t0 = time.monotonic()
    scan = Scan()
    outbox_ids = scan_outbox(cfg, scan)
    scan_audit(cfg, scan)
    scan_spool(cfg, scan, outbox_ids, t0 + time_limit_s)
    return scan, render(scan, cfg, time.time(), time.monotonic() - t0)


def write_output(path: str, text: str) -> None:
    """Replace `path` atomically (node_exporter reads only *.prom: the temporary name ends in
    .tmp)."""
    from gpualert_slurm.core.spool import opened_dir, write_atomic

    d, name = os.path.split(os.path.abspath(path))
    os.makedirs(d, 0o755, exist_ok=True)  # node_exporter's textfile dir, before it is installed
    with opened_dir(d) as fd:
        write_atomic(fd, name, text.encode(), 0o644)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert metrics", description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="config file (default: $GPUALERT_CONFIG or "
                    "/etc/gpualert/gpualert.yaml)")
    ap.add_argument("--output", "-o", default=DEFAULT_OUTPUT,
                    help=f"the .prom file to replace ('-': stdout; default {DEFAULT_OUTPUT})")
    ap.add_argument("--time-limit", type=float, default=90.0,
                    help="stop scanning the spool after this many seconds (default 90)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    scan, text = collect(cfg, args.time_limit)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        write_output(args.output, text)
    except OSError as e:
        print(f"gpualert metrics: cannot write {args.output}: {e}", file=sys.stderr)
        return 1
    partial = "" if scan.complete else " (partial: time limit)"
    print(f"gpualert metrics: {args.output}: {scan.job_dirs} job dirs, {scan.verdicts} "
          f"verdicts{partial}")
    return 0
