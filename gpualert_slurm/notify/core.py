"""submit() and flush(): outbox first, then bounded sending; see the package's doc."""

from __future__ import annotations

import contextlib
import email.message
import os
import time
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.core.config import Config
from gpualert_slurm.notify.channels import channel as channel_of
from gpualert_slurm.notify.message import safe_header
from gpualert_slurm.notify.outbox import Outbox, OutboxError, new_id
from gpualert_slurm.notify.recipients import channels_for_job, envelope_sender
from gpualert_slurm.notify.smtp import Outcome

__all__ = ["STATUSES", "ChannelResult", "Delivery", "FlushResult", "OutboxSummary", "flush",
           "requeue_quarantined", "safe_header", "sanitise_headers", "submit", "summarise"]

STATUSES = ("sent", "queued", "quarantined", "failed")
LEASE_MARGIN_S = 5.0  # a submit's entry is left alone by flush until its bound + this
FLUSH_RETRY_BASE_S = 60.0  # flush backoff: 1, 2, 4 ... minutes
FLUSH_RETRY_MAX_S = 3600.0
ORPHAN_AGE_S = 600.0


@dataclass(frozen=True)
class ChannelResult:
    channel: str
    status: str
    reason: str
    path: str | None = None


@dataclass(frozen=True)
class Delivery:
    """The outcome of submit(). status: sent (accepted everywhere); queued (kept in the
    outbox, `gpualert flush` sends it later); quarantined (given up on: bad recipients, a
    5xx, a bad channel; kept with its reason); failed (not sent and the outbox could not keep
    it: the reason says why). `path`: the outbox file of the first message not sent."""

    status: str
    reason: str
    path: str | None = None
    channels: tuple[ChannelResult, ...] = ()

    @property
    def sent(self) -> bool:
        return self.status == "sent"


@dataclass
class FlushResult:
    sent: int = 0
    waiting: int = 0  # still in the outbox, to be tried again
    quarantined: int = 0
    skipped: int = 0  # being sent by someone else, or not due yet
    purged: int = 0  # quarantined entries past notify.quarantine_keep, deleted
    errors: list[str] = field(default_factory=list)
    busy: bool = False  # another flush holds the lock

    def line(self) -> str:
        if self.busy:
            return "gpualert flush: another flush is running; nothing done"
        text = (f"gpualert flush: sent {self.sent}, waiting {self.waiting}, quarantined "
                f"{self.quarantined}, skipped {self.skipped}")
        if self.purged:
            text += f", purged {self.purged}"
        return text


# ---- message preparation --------------------------------------------------------------------

def sanitise_headers(msg: email.message.Message) -> list[str]:
    """Rewrite, in place, every header (of every MIME part) whose value holds CR or LF, so no
    line of it can become a header of its own. Returns the names of the headers rewritten."""
    fixed: list[str] = []
    for part in msg.walk():
        items = part.items()
        bad = [n for n, v in items if "\r" in str(v) or "\n" in str(v) or "\r" in n
               or "\n" in n or ":" in n]
        if not bad:
            continue
        for name in {n for n, _ in items}:
            del part[name]
        for name, value in items:
            if "\r" in name or "\n" in name or ":" in name:
                fixed.append(safe_header(name, 60))
                continue  # a header name with a line break is no header at all
            if "\r" in str(value) or "\n" in str(value):
                fixed.append(name)
                value = safe_header(str(value), 998)
            part[name] = value
    return fixed


# ---- sending one entry ----------------------------------------------------------------------

def _send_entry(cfg: Config, state: dict[str, Any], data: bytes, deadline: float) -> Outcome:
    return channel_of(str(state["channel"])).send(cfg, state, data, deadline)


def _note(state: dict[str, Any], out: Outcome) -> None:
    state["attempts"] = int(state.get("attempts", 0)) + 1
    state["last_error"] = out.reason
    state.setdefault("history", []).append({"at": time.time(), "error": out.reason})


def _give_up_reason(cfg: Config, state: dict[str, Any], out: Outcome) -> str | None:
    if out.permanent:
        return out.reason
    if int(state.get("attempts", 0)) >= cfg.notify.max_attempts:
        return f"{state['attempts']} attempts failed (notify.max_attempts); last: {out.reason}"
    if time.time() - float(state.get("created", time.time())) > cfg.notify.max_age_s:
        return f"older than notify.max_age; last: {out.reason}"
    return None


def _next_retry(state: dict[str, Any]) -> float:
    n = max(0, int(state.get("attempts", 1)) - 1)
    return time.time() + min(FLUSH_RETRY_MAX_S, FLUSH_RETRY_BASE_S * 2 ** min(n, 12))


def _submit_channel(cfg: Config, ob: Outbox | None, ob_error: str | None, channel: str,
                    msg: email.message.Message, job_id: str, deadline: float,
                    sanitised: list[str]) -> ChannelResult:
    now = time.time()
    state: dict[str, Any] = {
        "version": 1, "job_id": job_id, "channel": channel, "created": now, "attempts": 0,
        "lease_until": now + (deadline - time.monotonic()) + LEASE_MARGIN_S,
        "next_attempt": now, "subject": safe_header(str(msg.get("Subject", "")), 200),
        "history": [],
    }
    if sanitised:
        state["sanitised_headers"] = sanitised
    data, permanent = channel_of(channel).prepare(cfg, msg, state)
    entry_id = new_id(job_id, channel)
    path: str | None = None
    if ob is not None:
        try:
            if permanent:
                state.update(last_error=permanent, quarantined_at=now)
                path = ob.put(entry_id, data, state, quarantined=True)
                return ChannelResult(channel, "quarantined", permanent, path)
            path = ob.put(entry_id, data, state)
        except OutboxError as e:
            ob_error = str(e)
    if permanent:  # and no outbox to keep it in
        return ChannelResult(channel, "failed", f"{permanent}; {ob_error}")

    lock = ob.locked(entry_id) if path and ob else contextlib.nullcontext(True)
    with lock:
        out = Outcome(False, "not tried: time bound reached")
        for i in range(cfg.notify.tries):
            if i:
                pause = cfg.notify.backoff_s * 2 ** (i - 1)
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            out = _send_entry(cfg, state, data, deadline)
            if path:
                _note(state, out)
            if out.ok or out.permanent:
                break
    extra = f"; refused: {'; '.join(state['refused'])}" if state.get("refused") else ""
    if out.ok:
        if path and ob:
            try:
                ob.remove(entry_id)
            except OSError as e:  # sent but still listed: flush would send it twice
                return ChannelResult(channel, "sent", f"{out.reason}{extra}; could not remove "
                                     f"{path}: {e.strerror}: delete it by hand")
        note = f"; outbox not used: {ob_error}" if ob_error else ""
        return ChannelResult(channel, "sent", out.reason + extra + note)
    if not path or not ob:
        return ChannelResult(channel, "failed", f"{out.reason}; and the message could not "
                             f"be kept: {ob_error}")
    state["lease_until"] = 0
    give_up = _give_up_reason(cfg, state, out)
    try:
        if give_up:
            state.update(last_error=give_up, quarantined_at=time.time())
            return ChannelResult(channel, "quarantined", give_up + extra,
                                 ob.quarantine(entry_id, state))
        state["next_attempt"] = _next_retry(state)
        ob.write_state(entry_id, state)
    except OSError as e:
        return ChannelResult(channel, "queued", f"{out.reason}; state not updated: {e}", path)
    return ChannelResult(channel, "queued", f"{out.reason} (waits for `gpualert flush`)",
                         path)


def _combine(results: list[ChannelResult]) -> Delivery:
    for status in ("failed", "quarantined", "queued"):
        if any(r.status == status for r in results):
            break
    else:
        status = "sent"
    if not results:
        return Delivery("quarantined", "no channel to send to (notify.default is empty and no "
                        "rule matched)")
    reason = "; ".join(f"{r.channel}: {r.status}: {r.reason}" for r in results)
    path = next((r.path for r in results if r.status != "sent" and r.path), None)
    return Delivery(status, reason, path, tuple(results))


def submit(msg: email.message.Message, *, cfg: Config, job_id: str,
           channels: list[str] | None = None, timeout_s: float | None = None) -> Delivery:
    """Keep the message in the outbox, then try to send it within the bound
    (timeout_s, default notify.total_timeout_s, for all channels together); never raises
    for a delivery problem. channels=None: the config's rule for this job (by the user,
    partition, account in its job.json), else notify.default."""
    deadline = time.monotonic() + (timeout_s if timeout_s is not None
                                   else cfg.notify.total_timeout_s)
    job_id = str(job_id)
    try:
        names = list(channels) if channels is not None else channels_for_job(cfg, job_id)
        sanitised = sanitise_headers(msg)
        outbox = Outbox(cfg.outbox)
        ob: Outbox | None = outbox
        ob_error = None
        try:
            outbox.open()
        except OutboxError as e:
            ob, ob_error = None, str(e)
        try:
            results = [_submit_channel(cfg, ob, ob_error, ch, msg, job_id, deadline, sanitised)
                       for ch in dict.fromkeys(names)]
        finally:
            if ob is not None:
                ob.close()
        return _combine(results)
    except Exception as e:  # noqa: BLE001 - the hook's contract: never raise for delivery
        return Delivery("failed", f"gpualert notify: {type(e).__name__}: {e}")


# ---- flush ----------------------------------------------------------------------------------

def flush(cfg: Config, *, everything: bool = False, timeout_s: float | None = None,
          per_message_s: float | None = None) -> FlushResult:
    """Send what waits in the outbox: oldest first, each message within its own bound, one
    unreachable relay (or endpoint) ending that channel's turn for this run. everything:
    also what is not due yet. Quarantines a message after notify.max_attempts, a permanent
    error or notify.max_age; deletes quarantined ones after notify.quarantine_keep."""
    res = FlushResult()
    end = time.monotonic() + (timeout_s if timeout_s is not None else 3000.0)
    per = per_message_s if per_message_s is not None else cfg.notify.total_timeout_s
    ob = Outbox(cfg.outbox)
    try:
        ob.open(create=False)
    except OutboxError as e:
        if e.errno == 2:  # nothing was ever queued
            return res
        res.errors.append(str(e))
        return res
    with ob, ob.flush_lock() as mine:
        if not mine:
            res.busy = True
            return res
        for orphan in ob.orphans(ORPHAN_AGE_S):  # a crash between the .eml and the .json
            _adopt_orphan(cfg, ob, orphan, res)
        down: set[str] = set()
        for entry_id in ob.ids():
            if time.monotonic() >= end:
                res.waiting += 1
                continue
            try:
                state = ob.read_state(entry_id)
            except (OSError, ValueError) as e:
                res.errors.append(f"{entry_id}: unreadable state: {e}")
                continue
            now = time.time()
            if float(state.get("lease_until", 0)) > now or (
                    not everything and float(state.get("next_attempt", 0)) > now):
                res.skipped += 1
                continue
            if state.get("channel") in down:
                # Not tried this run, but never kept past max_age: a long outage must not
                # leave the outbox growing with messages nobody will get in time.
                if now - float(state.get("created", now)) > cfg.notify.max_age_s:
                    _quarantine_old(ob, entry_id, state, res)
                else:
                    res.waiting += 1
                continue
            with ob.locked(entry_id) as mine_entry:
                if not mine_entry:
                    res.skipped += 1
                    continue
                try:
                    data = ob.read_message(entry_id)
                except OSError as e:
                    res.errors.append(f"{entry_id}: unreadable message: {e}")
                    continue
                out = _send_entry(cfg, state, data, min(end, time.monotonic() + per))
                _note(state, out)
                try:
                    if out.ok:
                        ob.remove(entry_id)
                        res.sent += 1
                        continue
                    if out.unreachable:
                        down.add(state["channel"])
                    give_up = _give_up_reason(cfg, state, out)
                    if give_up:
                        state.update(last_error=give_up, quarantined_at=time.time())
                        ob.quarantine(entry_id, state)
                        res.quarantined += 1
                    else:
                        state["next_attempt"] = _next_retry(state)
                        ob.write_state(entry_id, state)
                        res.waiting += 1
                except OSError as e:
                    res.errors.append(f"{entry_id}: {e}")
        res.purged = _purge(cfg, ob, res)
    return res


def _quarantine_old(ob: Outbox, entry_id: str, state: dict[str, Any],
                    res: FlushResult) -> None:
    with ob.locked(entry_id) as mine:
        if not mine:
            res.skipped += 1
            return
        state.update(last_error=f"older than notify.max_age; last: {state.get('last_error')}",
                     quarantined_at=time.time())
        try:
            ob.quarantine(entry_id, state)
            res.quarantined += 1
        except OSError as e:
            res.errors.append(f"{entry_id}: {e}")


def _adopt_orphan(cfg: Config, ob: Outbox, entry_id: str, res: FlushResult) -> None:
    """Give an .eml left without its state one, recipients from its own headers."""
    parts = entry_id.split("-")
    channel = "-".join(parts[2:-1])
    state: dict[str, Any] = {
        "version": 1, "job_id": parts[1], "channel": channel, "created": time.time(),
        "attempts": 0, "next_attempt": 0, "lease_until": 0, "sender": envelope_sender(cfg),
        "history": [{"at": time.time(), "error": "found without its state (a crash while it "
                     "was queued): recipients taken from its headers"}],
    }
    try:
        why = channel_of(channel).adopt(cfg, lambda: ob.read_message(entry_id), state)
        if why:
            state.update(last_error=why, quarantined_at=time.time())
            ob.quarantine(entry_id, state)
            res.quarantined += 1
            return
        ob.write_state(entry_id, state)
    except (OSError, ValueError) as e:
        res.errors.append(f"orphan {entry_id}: {e}")


def _purge(cfg: Config, ob: Outbox, res: FlushResult) -> int:
    n = 0
    for entry_id in ob.ids(quarantined=True):
        try:
            state = ob.read_state(entry_id, quarantined=True)
            if time.time() - float(state.get("quarantined_at", time.time())) > \
                    cfg.notify.quarantine_keep_s:
                ob.remove(entry_id, quarantined=True)
                n += 1
        except (OSError, ValueError) as e:
            res.errors.append(f"quarantine/{entry_id}: {e}")
    return n


def requeue_quarantined(cfg: Config) -> int:
    """Move every quarantined message back to the outbox, attempts reset (after the admin
    fixed the cause); returns how many."""
    n = 0
    with Outbox(cfg.outbox).open(create=False) as ob:
        for entry_id in ob.ids(quarantined=True):
            state = ob.read_state(entry_id, quarantined=True)
            state.setdefault("history", []).append(
                {"at": time.time(), "error": f"requeued after: {state.get('last_error')}"})
            state.update(attempts=0, next_attempt=0, lease_until=0, created=time.time())
            state.pop("quarantined_at", None)
            ob.requeue(entry_id, state)
            n += 1
    return n


@dataclass
class OutboxSummary:
    path: str
    waiting: int = 0
    oldest_waiting_s: float | None = None
    quarantined: int = 0
    oldest_quarantine_reason: str | None = None
    error: str | None = None
    exists: bool = True


def summarise(cfg: Config) -> OutboxSummary:
    """Counts for `gpualert doctor`; reads only."""
    s = OutboxSummary(cfg.outbox)
    if not os.path.lexists(cfg.outbox):
        s.exists = False
        return s
    try:
        with Outbox(cfg.outbox).open(create=False) as ob:
            ids = ob.ids()
            s.waiting = len(ids)
            if ids:
                s.oldest_waiting_s = time.time() - int(ids[0].split("-")[0]) / 1e9
            q = ob.ids(quarantined=True)
            s.quarantined = len(q)
            if q:
                try:
                    st = ob.read_state(q[0], quarantined=True)
                    s.oldest_quarantine_reason = f"{q[0]}: {st.get('last_error')}"
                except (OSError, ValueError) as e:
                    s.oldest_quarantine_reason = f"{q[0]}: unreadable state: {e}"
    except OutboxError as e:
        s.error = str(e)
    return s
