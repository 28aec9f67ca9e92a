"""What recovery did, does or would do for a run, and why, in sentences for the report
(verdict.json's "recovery", written by recovery; read here, so that the report stands below
recovery and recovery's watch may use the report)."""

from __future__ import annotations

from typing import Any

from gpualert_slurm.core.vocab import CHECK, CHECK_TAKEN, Action, spec_of


def _taken(action: object, target: object, held: str) -> str:
    """An action carried out, in the report's words (its ActionSpec's `taken`)."""
    if action == CHECK:
        return CHECK_TAKEN
    spec = spec_of(action)
    if spec is None or spec.taken is None:
        return str(action)
    return spec.taken.format(target=target, held=held)


def _planned(action: object, target: object, held: str) -> str:
    """An action about to be carried out (its ActionSpec's `planned`)."""
    spec = spec_of(action)
    if spec is None or spec.planned is None:
        return f"does {action} {target}"
    return spec.planned.format(target=target, held=held)


def _words(action: object) -> str:
    """An action in running text ("drain node")."""
    spec = spec_of(action)
    return spec.words if spec else str(action or "").replace("_", " ")


def xid_lines(found: Any) -> list[str]:
    """The sealed driver Xid lines recovery read (node -> the GPU fault catalogue's reading), in
    words a user understands: the code, what it means, what NVIDIA says the node needs."""
    from gpualert_slurm.core.xid import BUCKET_ADVICE

    out = []
    for node, x in (found or {}).items() if isinstance(found, dict) else ():
        if not isinstance(x, dict):
            continue
        sub = x.get("sub") or {}
        unit = f", {sub.get('unit')} sub-code 0x{int(sub.get('sub_code') or 0):02x}" if sub else ""
        advice = BUCKET_ADVICE.get(str(x.get("bucket")), str(x.get("bucket")))
        esc = f" ({x['escalated']}: escalated)" if x.get("escalated") else ""
        out.append(f"The GPU driver on {node} reported Xid {x.get('code')} ({x.get('short')}"
                   f"{unit}): {x.get('meaning')}. NVIDIA's advice: {advice}{esc}.")
    return out


def report_lines(summary: dict[str, Any] | None) -> list[str]:
    """What recovery did, does or would have done for this run, and why, in sentences for the
    report (verdict.json's "recovery"; the report's templates render these lines). The job
    epilog decides before it mails and acts after: a "planned" summary says what follows."""
    if not summary:
        return []
    outcome = summary.get("outcome")
    if outcome == "error":
        return [f"Recovery failed ({summary.get('error')}); Slurm's normal handling applies."]
    if outcome in ("undecided", "abandoned") and not summary.get("rule"):
        return [f"Recovery had not decided when this was written ({summary.get('why')}); "
                "`gpualert show` has the decision once it is made."]
    lines = xid_lines(summary.get("xid"))
    excl = [p for p in summary.get("planned") or summary.get("would") or []
            if p.get("action") == Action.REQUEUE]
    held = " (held)" if excl and excl[0].get("hold") else ""
    for t in summary.get("taken") or []:
        lines.append(f"gpualert {_taken(t.get('action'), t.get('target'), held)}: "
                     f"{t.get('outcome')}.")
    if outcome == "planned":
        for p in summary.get("planned") or []:
            lines.append(f"gpualert {_planned(p.get('action'), p.get('target'), held)} now "
                         "(right after this report).")
    for w in summary.get("would") or []:
        lines.append(f"In action mode gpualert would {_words(w.get('action'))} "
                     f"{w.get('target')}.")
    for n in summary.get("not_taken") or []:
        tgt = f" {n['target']}" if n.get("target") else ""
        if summary.get("would") and n.get("why", "").startswith(("monitor mode", "rule ",
                                                                 "the user")):
            continue
        if n.get("action") == Action.REQUEUE:
            lines.append(f"Not requeued: {n.get('why')}.")
            continue
        if n.get("provenance"):  # the fact it needs did not come from Slurm or root
            lines.append(f"Not acted on: {_words(n.get('action', ''))}{tgt}: "
                         f"{n.get('why')}.")
            continue
        lines.append(f"Not done: {_words(n.get('action', ''))}{tgt}: {n.get('why')}.")
    if summary.get("not_retried"):
        lines.append(f"Not requeued: {summary['not_retried']}.")
    if summary.get("would"):
        why = next((n["why"] for n in summary.get("not_taken") or []), "")
        lines.append(f"Nothing was done: {why}.")
    if summary.get("retries_left") is not None and not summary.get("not_retried"):
        lines.append(f"Retries left for this job: {summary['retries_left']}.")
    return lines
