"""The recovery policy as a pure function: a verdict, the job's facts and the audit history in,
a Decision out. No Slurm, no files (except loading the rules data), so every rule is
unit-tested (tests/test_recovery_policy.py); recovery/__init__.py gathers the facts and
recovery/actions.py carries the decision out."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from gpualert_slurm.core.classes import class_domains
from gpualert_slurm.core.config import RecoveryConfig
from gpualert_slurm.core.verdict import VerdictRecord
from gpualert_slurm.core.vocab import (
    NODE_ACTIONS,
    REQUEUE_FAMILY,
    Action,
    Mode,
    Need,
    NotTaken,
    PlannedStep,
    spec_of,
)


@dataclass(frozen=True)
class Rule:
    name: str  # the class id or domain:<d> it was found under ("default": nothing matched)
    do: tuple[str, ...] = ()
    retries: int = 0
    shadow: bool = False


@dataclass(frozen=True)
class JobFacts:
    """What the decision needs to know about the job beyond its verdict."""

    job_id: str
    attempt: int  # Slurm's restart count of the run that just ended (0: first run)
    partition: str = ""
    nodes: tuple[str, ...] = ()
    suspects: tuple[str, ...] = ()  # nodes the verdict (or Slurm) blames
    recover: bool | None = None  # the user's recover= option (None: not given)
    checkpoint: str | None = None  # the user's checkpoint= glob
    checkpoint_newest: float | None = None  # newest mtime of its matches now
    partition_size: int = 0  # nodes in the partition (0: unknown)
    breaker_open: bool = False  # the partition's drain breaker is open (tripped, not reset)
    time: float = 0.0
    # Provenance (docs/SECURITY.md): `nodes` are the nodes Slurm says ran this attempt;
    # `suspects` those the verdict blames, whatever its evidence's origin (explanation, and the
    # job's own requeue exclusion within `nodes`); `proven` node -> the Slurm or root fact that
    # backs the class there: only those nodes are drained, escalated, counted or flagged.
    proven: tuple[tuple[str, str], ...] = ()
    refuted: tuple[tuple[str, str], ...] = ()  # node -> why nothing backs the class there
    user: str = ""  # the job's user, as Slurm says (the per-user drain cap)
    node_set: tuple[str, ...] = ()  # the partition's nodes as Slurm lists them (): unknown
    drained_now: tuple[str, ...] = ()  # of node_set: drained now with a gpualert: reason


@dataclass
class Decision:
    id: str
    job: str
    attempt: int
    cls: str
    domain: str
    signature: str
    rule: str
    mode: Mode  # after the per-partition override
    shadow: bool
    recommended: list[str]  # what the rule asks for (after escalation)
    planned: list[PlannedStep] = field(default_factory=list)
    would: list[PlannedStep] = field(default_factory=list)  # planned, were it action mode
    not_taken: list[NotTaken] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    retries_left: int = 0
    checkpoint_newest: float | None = None
    trip_breaker: bool = False
    flagged_nodes: list[str] = field(default_factory=list)
    acts: bool = False  # True when something will really be done
    # the nodes Slurm or root facts blame (the only ones later decisions count) and why
    trusted_suspects: list[str] = field(default_factory=list)
    backing: dict[str, str] = field(default_factory=dict)
    # node -> the GPU fault catalogue's reading of the sealed driver Xid line that backs the
    # class there (core/xid.py: code, meaning, bucket; "asked": the bucket before escalation)
    xid: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["class"] = d.pop("cls")
        return d


@functools.cache
def builtin_policy() -> dict[str, Any]:
    import yaml

    text = resources.files("gpualert_slurm.recovery").joinpath("policy.yaml").read_text()
    return yaml.safe_load(text)


def rules_table(cfg: RecoveryConfig) -> dict[str, Rule]:
    """The built-in rules with the admin's overrides merged in, key by key."""
    raw: dict[str, dict[str, Any]] = {k: dict(v) for k, v in builtin_policy()["rules"].items()}
    for name, over in cfg.rules:
        raw.setdefault(name, {}).update(over)
    return {name: Rule(name, tuple(r.get("do") or ()), int(r.get("retries", 0)),
                       bool(r.get("shadow", False))) for name, r in raw.items()}


def not_retried(cfg: RecoveryConfig, d: Decision) -> str | None:
    """Why the decision requeues nothing when its rule asks for no requeue (the report's
    "Not requeued: ..."); None when a requeue is planned, would be, or was refused for a
    reason of its own (retry budget, whitelist, ...: those are in not_taken)."""
    acts = [p["action"] for p in d.planned + d.would] + [n["action"] for n in d.not_taken]
    if any(a in (Action.REQUEUE, Action.HOLD) for a in acts):
        return None
    if d.rule in dict(cfg.rules):
        return f"the site's recovery rule {d.rule} does not requeue {d.cls}"
    why = builtin_policy().get("not_retried") or {}
    text = why.get(d.cls) or why.get(f"domain:{d.domain}")
    return f"{text} (rule {d.rule})" if text else f"recovery rule {d.rule} does not requeue it"


def find_rule(cfg: RecoveryConfig, cls: str, domain: str) -> Rule:
    table = rules_table(cfg)
    return table.get(cls) or table.get(f"domain:{domain}") or Rule("default")


_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b\d{4,}\b|\d{4}-\d\d-\d\d[T ][\d:.]+|pid[ =:]*\d+",
                       re.IGNORECASE)


def signature(verdict: VerdictRecord | Mapping[str, Any], nodes: tuple[str, ...] = ()) -> str:
    """What makes two failures "the same": the class and its first evidence line without the
    parts that differ every time (addresses, pids, times, long numbers, the "node: " prefix of
    kernel lines). Xid 79 stays 79."""
    v = VerdictRecord.of(verdict).cause
    cls = v.klass
    ev = v.evidence
    text = str(ev[0].text or "") if ev else ""
    text = _VOLATILE.sub("#", text)
    for n in nodes:
        text = text.removeprefix(f"{n}: ")
    return f"{cls}:{' '.join(text.split())[:160]}"


def _decisions(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [h for h in history if h.get("event") == "decision"]


def drains_in_window(history: list[dict[str, Any]], partition: str, since: float,
                     node_set: tuple[str, ...] = (), user: str | None = None) -> set[str]:
    """Nodes gpualert drained (done) since `since` in the node set (by node, whatever the
    partition's name; by partition name when the set is not known), and those a decision
    still being carried out plans to drain (the job epilog decides before it mails and acts
    after: the breaker must count them meanwhile). `user`: only drains for that user's jobs."""
    out: set[str] = set()
    ended = {h.get("id") for h in history if h.get("event") == "outcome"}
    owner = {h.get("id"): h.get("user") for h in history if h.get("event") == "decision"}
    members = set(node_set)

    def inside(h: dict[str, Any], node: str) -> bool:
        if user is not None and owner.get(h.get("id")) != user:
            return False
        return node in members if members else h.get("partition") == partition

    for h in history:
        if float(h.get("time") or 0) < since:
            continue
        if (h.get("event") == "result" and h.get("action") == Action.DRAIN_NODE
                and h.get("outcome") == "done" and inside(h, str(h.get("target")))):
            out.add(str(h.get("target")))
        elif h.get("event") == "decision" and h.get("id") not in ended:
            out |= {str(p.get("target")) for p in h.get("planned") or []
                    if p.get("action") == Action.DRAIN_NODE and inside(h, str(p.get("target")))}
    return out


def drained_by_user(history: list[dict[str, Any]], user: str, nodes: tuple[str, ...]
                    ) -> set[str]:
    """Of `nodes` (drained now by gpualert), those whose last gpualert drain was for a job of
    `user`."""
    owner = {h.get("id"): h.get("user") for h in history if h.get("event") == "decision"}
    last: dict[str, Any] = {}
    for h in history:
        if (h.get("event") == "result" and h.get("action") == Action.DRAIN_NODE
                and h.get("outcome") == "done"):
            last[str(h.get("target"))] = owner.get(h.get("id"))
    return {n for n in nodes if last.get(n) == user}


@dataclass
class _Case:
    """What decide's phases share about one failed run: the rule, the audit log's earlier
    decisions, and the nodes by provenance (docs/SECURITY.md, section 3)."""
    cfg: RecoveryConfig
    facts: JobFacts
    history: list[dict[str, Any]]
    d: Decision
    rule: Rule
    sig: str
    past: list[dict[str, Any]]
    ran: set[str]
    proven: dict[str, str]  # node -> the Slurm or root fact that backs the class there
    refuted: dict[str, str]
    claimed: list[str]  # suspects the verdict names, whoever named them
    trusted: list[str]  # the proven ones
    excludable: list[str]  # what the job's own requeue may leave out
    escalated: bool = False  # _escalate asked for the drain (the same fault in others' jobs)

    def unbacked(self, n: str) -> str:
        cls = self.d.cls
        if n not in self.ran:
            return self.refuted.get(n) or (
                f"Slurm did not run this attempt on {n} (it ran on "
                f"{', '.join(self.facts.nodes) or 'no node Slurm named'})")
        return self.refuted.get(n) or f"no fact from Slurm or root on {n} says {cls}"


def decide(cfg: RecoveryConfig, verdict: VerdictRecord | Mapping[str, Any], facts: JobFacts,
           history: list[dict[str, Any]]) -> Decision:
    """What to do about one failed run. `history`: the audit log's records (any order).
    Drains, escalations, suspect-node statistics and the breaker go only by facts.proven
    (Slurm's or root's word about a node Slurm says ran this attempt); what the job printed
    may requeue the job itself, excluding only nodes Slurm says it ran on (docs/SECURITY.md).
    The phases, in order: escalation, blast radius, retry budget, then what is planned (the
    breaker, the per-user cap, monitor mode), then the nodes flagged for the admin."""
    c = _case(cfg, VerdictRecord.of(verdict), facts, history)
    _xid_bucket(c)
    _escalate(c)
    _blast_radius(c)
    _retry_budget(c)
    _plan(c, _why_not_acted(c))
    _flag_nodes(c)
    return c.d


def _case(cfg: RecoveryConfig, verdict: VerdictRecord, facts: JobFacts,
          history: list[dict[str, Any]]) -> _Case:
    cls = verdict.cause.klass
    domain = str(verdict.cause.domain or class_domains().get(cls, "unknown"))
    sig = signature(verdict, facts.nodes)
    rule = find_rule(cfg, cls, domain)
    mode = cfg.mode_for(facts.partition)
    d = Decision(id=f"{facts.job_id}.{facts.attempt}", job=facts.job_id, attempt=facts.attempt,
                 cls=cls, domain=domain, signature=sig, rule=rule.name, mode=mode,
                 shadow=rule.shadow, recommended=list(rule.do),
                 checkpoint_newest=facts.checkpoint_newest)
    ran = set(facts.nodes)
    proven = {n: why for n, why in facts.proven if n in ran}
    claimed = list(dict.fromkeys(facts.suspects))
    trusted = list(proven)
    d.trusted_suspects, d.backing = list(trusted), dict(proven)
    # the job's own requeue may leave out any node Slurm ran it on, whoever named it
    excludable = list(dict.fromkeys([*trusted, *(n for n in claimed if n in ran)]))
    return _Case(cfg, facts, history, d, rule, sig, _decisions(history), ran, proven,
                 dict(facts.refuted), claimed, trusted, excludable)


def _xid_drains(history: list[dict[str, Any]], node: str, code: int, since: float) -> int:
    """Drains of `node` gpualert carried out since `since` for decisions whose sealed Xid on
    that node was `code` (each a GPU reset or a reboot an admin did)."""
    code_of = {h.get("id"): ((h.get("xid") or {}).get(node) or {}).get("code")
               for h in history if h.get("event") == "decision"}
    return sum(1 for h in history if h.get("event") == "result"
               and h.get("action") == Action.DRAIN_NODE and h.get("outcome") == "done"
               and h.get("target") == node and float(h.get("time") or 0) >= since
               and code_of.get(h.get("id")) == code)


def _xid_bucket(c: _Case) -> None:
    """The GPU fault catalogue on the sealed driver Xid line that backs the class on each
    proven node (never a line the job printed: only proven nodes are read): its bucket says
    what the node needs. For gpu_hardware (or cuda_error on a code a site made hardware) under
    the shipped rule, the bucket's actions replace
    the rule's (IGNORE nothing, RESTART_APP requeue only, RESET_GPU / RESTART_BM / CONTACT_SUPPORT
    drain and requeue elsewhere); a site rule for the class in recovery.rules keeps its own.
    A node drained for the same code `escalation.after` times within the window escalates to
    CONTACT_SUPPORT (gpud's reboot threshold)."""
    from gpualert_slurm.core import xid

    d = c.d
    try:
        cat = xid.catalogue()
    except Exception as e:  # a broken shipped file: the class's rule alone decides
        d.notes.append(f"the GPU fault catalogue could not be read ({str(e)[:120]})")
        return
    since = c.facts.time - cat.escalate_window_s
    for n in c.trusted:
        prefix = f"kernel log of {n}: "
        why = c.proven.get(n, "")
        f = cat.read(why[len(prefix):]) if why.startswith(prefix) else None
        if f is None:
            continue
        item = {**f.to_json(), "asked": f.bucket}
        if f.bucket in ("RESET_GPU", "RESTART_BM"):
            done = _xid_drains(c.history, n, f.code, since)
            if done >= cat.escalate_after:
                item["bucket"] = "CONTACT_SUPPORT"
                item["escalated"] = (f"{n} was drained {done} times for Xid {f.code} within "
                                     f"{cat.escalate_window_s // 3600} h")
                d.notes.append(f"escalated to CONTACT_SUPPORT: {item['escalated']} "
                               f"(the GPU fault catalogue's threshold {cat.escalate_after})")
        d.xid[n] = item
    # a cuda_error verdict follows the bucket only where the site made the code hardware
    # (xid.d: cause: hardware); the shipped catalogue's application codes never drain
    hardware = d.cls == "gpu_hardware" or (d.cls == "cuda_error" and all(
        x.get("class") == "gpu_hardware" for x in d.xid.values()))
    if not d.xid or not hardware or c.rule.name in dict(c.cfg.rules):
        return
    bucket = xid.worst([x["bucket"] for x in d.xid.values()])
    d.recommended = list(xid.BUCKET_ACTIONS[bucket])
    d.notes.append("GPU fault catalogue: " + "; ".join(
        f"Xid {x['code']} ({x['short']}) on {n}: {x['bucket']}" for n, x in d.xid.items()))


def _escalate(c: _Case) -> None:
    """The same hardware signature on a proven node seen before, in other users' jobs: one
    user's program repeating an application Xid (13, 31, 43: root's facts, but caused at will)
    says something about the program, not the node."""
    cfg, facts, d, sig = c.cfg, c.facts, c.d, c.sig
    if d.cls not in set(builtin_policy().get("escalate_classes") or ()) or not c.trusted:
        return
    since = facts.time - cfg.flag_window_s
    for n in c.trusted:
        same = [h for h in c.past if h.get("signature") == sig
                and n in (h.get("trusted_suspects") or ()) and h.get("id") != d.id
                and float(h.get("time") or 0) >= since]
        seen = sum(1 for h in same if not facts.user or h.get("user") != facts.user)
        if seen < len(same) and seen + 1 < cfg.escalate_after:
            d.notes.append(f"not escalated: signature {sig!r} on {n} came again from "
                           f"{facts.user}'s own jobs only")
        if seen + 1 >= cfg.escalate_after and Action.DRAIN_NODE not in d.recommended:
            d.recommended = [Action.DRAIN_NODE.value, *d.recommended]
            if Action.REQUEUE in d.recommended and Action.EXCLUDE_NODE not in d.recommended:
                d.recommended.append(Action.EXCLUDE_NODE.value)
            d.notes.append(f"escalated: signature {sig!r} seen {seen + 1} times on {n}: "
                           "drain for inspection")
            c.escalated = True


def _blast_radius(c: _Case) -> None:
    """The same signature on many nodes lately is not the nodes' fault (counted on proven
    nodes only: printed text can neither hide a fault nor blame a node)."""
    cfg, d = c.cfg, c.d
    if d.cls not in set(builtin_policy().get("signature_classes") or ()):
        return
    since = c.facts.time - cfg.blast_window_s
    nodes = {n for h in c.past if h.get("signature") == c.sig
             and float(h.get("time") or 0) >= since
             for n in (h.get("trusted_suspects") or ())}
    nodes |= set(c.trusted)
    if len(nodes) >= cfg.blast_nodes:
        for a in NODE_ACTIONS:
            if a in d.recommended:
                d.recommended.remove(a)
                d.not_taken.append({"action": a, "why": (
                    f"blast radius: signature seen on {len(nodes)} nodes within "
                    f"{cfg.blast_window_s} s: a software or workload cause, not the node")})


def _retry_budget(c: _Case) -> None:
    """Slurm's restart count is the attempts used (its own requeues included); the rule's own
    limit, the same cause repeating and checkpoint progress stop a requeue too."""
    cfg, facts, d = c.cfg, c.facts, c.d
    budget = min(cfg.max_retries, c.rule.retries)
    d.retries_left = max(0, cfg.max_retries - facts.attempt)
    stop: str | None = None
    if Action.REQUEUE in d.recommended or Action.HOLD in d.recommended:
        same = sum(1 for h in c.past if h.get("job") == facts.job_id
                   and h.get("signature") == c.sig and h.get("id") != d.id) + 1
        if facts.attempt >= cfg.max_retries:
            stop = f"retry budget spent: {facts.attempt} of {cfg.max_retries} requeues used"
        elif facts.attempt >= budget:
            stop = f"rule {c.rule.name} allows {budget} requeue(s); {facts.attempt} used"
        elif same > cfg.same_cause_limit:
            stop = (f"the same cause ended {same} attempts (recovery.same_cause_limit "
                    f"{cfg.same_cause_limit})")
        elif facts.checkpoint and facts.attempt > 0:
            prev = max((h for h in c.past if h.get("job") == facts.job_id
                        and h.get("attempt", -1) < facts.attempt and h.get("id") != d.id),
                       key=lambda h: h.get("attempt", -1), default=None)
            before = prev.get("checkpoint_newest") if prev else None
            now = facts.checkpoint_newest
            if now is None or (before is not None and now <= before):
                stop = (f"no checkpoint progress: nothing matching {facts.checkpoint!r} is "
                        "newer than at the last attempt")
    if stop:
        for a in REQUEUE_FAMILY:
            if a in d.recommended:
                d.not_taken.append({"action": a, "why": stop})
        d.recommended = [a for a in d.recommended if a not in REQUEUE_FAMILY]
        d.notes.append(f"not requeued: {stop}")


def _why_not_acted(c: _Case) -> str | None:
    """Why what is planned is only what would be done (monitor mode, shadow, recover=off)."""
    cfg, facts = c.cfg, c.facts
    if c.d.mode != Mode.ACTION:
        return (f"monitor mode (partition {facts.partition})" if facts.partition in
                dict(cfg.partitions) else "monitor mode")
    if c.rule.shadow:
        return f"rule {c.rule.name} is in shadow mode"
    if facts.recover is False:
        return "the user opted out (recover=off)"
    return None


def _targets(c: _Case, a: str) -> list[str] | None:
    """What action `a` would act on (None: nothing, said in not_taken), by what its ActionSpec
    needs: a drain only proven nodes, the requeue's exclusion only nodes Slurm ran this
    attempt on, an action on the job the job."""
    spec = spec_of(a)
    if spec is None or spec.target == "job":
        return [c.facts.job_id]
    ok: Collection[str]
    ok, targets = (c.proven, c.trusted) if spec.needs == Need.PROVEN else (c.ran, c.excludable)
    if a == Action.DRAIN_NODE and c.d.xid and c.d.cls in ("gpu_hardware", "cuda_error") \
            and c.rule.name not in dict(c.cfg.rules) and not c.escalated:
        # a node whose own sealed Xid asks for no drain is not drained for another's (an
        # escalation is the other way round: the same fault in other users' jobs asks for it)
        from gpualert_slurm.core.xid import BUCKET_ACTIONS

        keep = [t for t in targets if t not in c.d.xid
                or Action.DRAIN_NODE in BUCKET_ACTIONS.get(c.d.xid[t]["bucket"], ())]
        for t in set(targets) - set(keep):
            c.d.not_taken.append({"action": a, "target": t, "why": (
                f"its Xid {c.d.xid[t]['code']} asks for {c.d.xid[t]['bucket']}, no drain")})
        targets = keep
    for n in c.claimed:
        if n not in ok:
            c.d.not_taken.append({"action": a, "target": n, "why": c.unbacked(n),
                                  "provenance": True})
    if not targets and not c.claimed:
        c.d.not_taken.append({"action": a, "why": "no suspect node named by the verdict"})
    return targets or None


def _plan(c: _Case, why_not: str | None) -> None:
    """The recommended actions, each on its targets, through the action whitelist, the
    breaker and the per-user cap; in monitor mode (why_not) what would be done."""
    cfg, facts, d = c.cfg, c.facts, c.d
    # The breaker counts state: the nodes of the node set gpualert has drained now, those
    # drained within the window and those planned meanwhile; a partition Slurm does not know
    # gets no allowance. The per-user cap counts the same for this user's jobs only.
    since = facts.time - cfg.breaker_window_s
    size = len(facts.node_set) or facts.partition_size
    drains_before = drains_in_window(c.history, facts.partition, since, facts.node_set) \
        | set(facts.drained_now)
    allowed_drains = max(1, math.floor(cfg.breaker_share * size)) if size else 0
    user_before = (drains_in_window(c.history, facts.partition, since, (), facts.user)
                   | drained_by_user(c.history, facts.user, facts.drained_now)) \
        if facts.user else set()
    for a in d.recommended:
        targets = _targets(c, a)
        if targets is None:
            continue
        if a not in cfg.actions:
            d.not_taken.append({"action": a, "why": f"{a} is not in recovery.actions"})
            continue
        spec = spec_of(a)
        if a == Action.EXCLUDE_NODE:
            d.exclude = list(targets)
            continue  # carried out with the requeue
        for t in targets:
            if spec is not None and spec.breaker:
                why = _drain_refused(c, t, size, drains_before, allowed_drains, user_before)
                if why:
                    d.not_taken.append({"action": a, "target": t, "why": why})
                    continue
                drains_before = drains_before | {t}
                user_before = user_before | {t}
            d.planned.append({"action": a, "target": t})
    if Action.REQUEUE in [p["action"] for p in d.planned] and Action.HOLD in d.recommended \
            and Action.HOLD in cfg.actions:
        d.planned = [p for p in d.planned if p["action"] != Action.HOLD]
        for p in d.planned:
            if p["action"] == Action.REQUEUE:
                p["hold"] = True
    if why_not and d.planned:
        for p in d.planned:
            d.not_taken.append(NotTaken(**p, why=why_not))
        d.would, d.planned = d.planned, []
    d.acts = bool(d.planned)
    # what is left after this decision's requeue (done, or only recorded in monitor mode)
    if any(p["action"] == Action.REQUEUE for p in d.planned + d.would):
        d.retries_left = max(0, d.retries_left - 1)


def _drain_refused(c: _Case, t: str, size: int, drains_before: set[str], allowed: int,
                   user_before: set[str]) -> str | None:
    """Why node t is not drained: the breaker open or tripping, an unknown partition, the
    per-user cap; None: it is (trip_breaker set when this drain trips it)."""
    cfg, facts = c.cfg, c.facts
    if facts.breaker_open:
        return (f"circuit breaker open for partition {facts.partition}: no new drains "
                "until an admin runs `gpualert resume --breaker`")
    if not size:
        return (f"partition {facts.partition or '(none)'} is not known to Slurm: no "
                "drain allowance")
    if facts.user and t not in user_before and len(user_before) + 1 > cfg.breaker_per_user:
        return (f"per-user cap: {len(user_before)} node(s) drained for "
                f"{facts.user}'s jobs (now or within {cfg.breaker_window_s} s), at "
                f"most {cfg.breaker_per_user}")
    if t not in drains_before and len(drains_before) + 1 > allowed:
        c.d.trip_breaker = True
        return (f"circuit breaker trips: {len(drains_before) + 1} nodes of partition "
                f"{facts.partition} drained by gpualert (now or within "
                f"{cfg.breaker_window_s} s), more than {cfg.breaker_share:.0%} of its "
                f"{size} nodes")
    return None


def _flag_nodes(c: _Case) -> None:
    """Nodes drained often lately are flagged for the admin (proven nodes only)."""
    cfg, d = c.cfg, c.d
    since = c.facts.time - cfg.flag_window_s
    for n in c.trusted:
        times = [h for h in c.history if h.get("event") == "result"
                 and h.get("outcome") == "done" and h.get("action") == Action.DRAIN_NODE
                 and h.get("target") == n and float(h.get("time") or 0) >= since]
        will = any(p["action"] == Action.DRAIN_NODE and p["target"] == n for p in d.planned)
        if len(times) + will >= cfg.flag_drains:
            d.flagged_nodes.append(n)
            d.notes.append(f"node {n} drained {len(times) + will} times within "
                           f"{cfg.flag_window_s} s: flagged for the admin")
