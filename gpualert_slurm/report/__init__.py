"""The report: one verdict.json rendered as plain text and HTML (Jinja2 templates, data files
under gpualert_slurm/data/templates/, overridden file by file from /etc/gpualert/templates/,
loaded by core/templates.py; docs/TEMPLATES.md), its subject, and the multipart mail message.
`gpualert show` and the job epilog use the same functions, so a terminal shows exactly what the
mail said.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import formataddr, formatdate, make_msgid
from functools import lru_cache
from typing import Any

from gpualert_slurm.core.templates import get_template
from gpualert_slurm.core.verdict import VerdictRecord

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
LAST_LINES = 30
# Header text may come from the user (job name, comment, paths): every control character,
# including Unicode line breaks, becomes a space before it reaches a header.
# The verdict: a core.verdict.VerdictRecord, or a verdict-shaped mapping (VerdictRecord.of
# checks it as verdict.json is checked).
_CTRL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")


@lru_cache(maxsize=1)
def labels() -> dict[str, str]:
    import yaml

    with open(os.path.join(DATA_DIR, "report-labels.yaml"), encoding="utf-8") as f:
        return dict((yaml.safe_load(f) or {}).get("labels") or {})


def header_text(text: Any, limit: int = 80) -> str:
    """One line, no control characters, at most `limit` characters: safe for a header."""
    s = _CTRL.sub(" ", str(text if text is not None else "")).strip()
    s = re.sub(r" {2,}", " ", s)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{n} B"


def _when(t: Any) -> str:
    if not isinstance(t, int | float):
        return str(t) if t else "?"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def _duration(s: Any) -> str:
    if not isinstance(s, int | float) or s < 0:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}"


def _short(path: Any, base: str) -> str:
    p = str(path or "")
    return p[len(base) + 1:] if base and p.startswith(base + "/") else p


def job_label(v: VerdictRecord | Mapping[str, Any]) -> str:
    """'123', or '120_3' for an array task (the parent array id first)."""
    return VerdictRecord.of(v).label


def status_word(v: VerdictRecord | Mapping[str, Any]) -> str:
    v = VerdictRecord.of(v)
    if v.silent_failure:
        return "FAILED (exit 0, silent failure)"
    if v.failed:
        return "FAILED"
    return v.job.slurm_state or "COMPLETED"


def subject(v: VerdictRecord | Mapping[str, Any]) -> str:
    """'[gpualert] FAILED job 123 (train-llama): CUDA out of memory on n2, rank 5'."""
    v = VerdictRecord.of(v)
    c = v.cause
    cls = c.klass
    s = f"[gpualert] {status_word(v)} job {v.label}"
    name = header_text(v.job.name, 60)
    if name:
        s += f" ({name})"
    if v.failed_or_silent:
        s += f": {labels().get(cls, cls)}"
        if c.root_node:
            s += f" on {header_text(c.root_node, 40)}"
        if c.root_rank is not None:
            s += f", rank {c.root_rank}"
    return header_text(s, 200)


def page_url(template: str | None, v: VerdictRecord | Mapping[str, Any]) -> str | None:
    """The job's web page (config report.url, `{job}` the job id), or None when unset."""
    if not template:
        return None
    return template.replace("{job}", str(VerdictRecord.of(v).job_id))


def context(v: VerdictRecord | Mapping[str, Any], cids: tuple[str, ...] = (),
            url: str | None = None) -> dict[str, Any]:
    """What the templates see: verdict.json plus the derived, display-ready fields; `cids`:
    the Content-IDs of the inline pictures the mail carries (report/timeline.py); `url`: the
    config's report.url, the job's web page the mail links to."""
    from gpualert_slurm.report import ranks, timeline

    v = VerdictRecord.of(v)
    c = v.cause
    job = v.job
    base = v.attempt_path or ""
    cls = c.klass
    exit_s = "?" if "exit_code" in job.omitted else f"{job.exit_code}"
    if job.signal:
        exit_s += f", signal {job.signal}"
    gpus_s = ", ".join(f"{n}: {g}" for n, g in sorted(job.gpus.items()) if g) or "none seen"
    facts = [
        ("User", job.user or "?"),
        ("Job", f"{v.label}" + (f" ({header_text(job.name, 200)})" if job.name else "")),
        ("Nodes", job.nodelist or ", ".join(job.nodes) or "?"),
        ("GPUs", gpus_s),
        ("Partition", job.partition or "?"),
        ("Start", _when(job.start_time)),
        ("End", _when(job.end_time)),
        ("Run time", _duration(job.run_time_s)),
        ("Exit code", exit_s),
        ("Slurm state", f"{job.slurm_state or '?'} (reason {job.slurm_reason or '?'})"),
        ("Work dir", job.work_dir or "?"),
    ]
    if v.attempt:
        facts.append(("Attempt", str(v.attempt)))
    # each line says where it came from ("printed by the job", "kernel log of n2", "Slurm:
    # NODE_FAIL": provenance.label); a verdict of an older version has no such label
    evidence = [dict(e.to_json(), short=_short(e.file, base), source=e.source)
                for e in c.evidence]
    cascades = [dict(x.to_json(), short=_short(x.file, base)) for x in c.cascades]
    last = v.last_lines
    if last:
        last = dict(last, short=_short(last.get("file"), base))
    man = v.artifacts
    if man:
        # a many-rank job: the first task logs by name, the rest on one line
        shown, more = ranks.attachment_groups(man.get("attached", []))
        man = dict(man, budget_h=human_size(man.get("budget")), used_h=human_size(man.get("used")),
                   attached=[dict(a, size_h=human_size(a.get("size"))) for a in shown],
                   attached_more=more and dict(more, size_h=human_size(more["size"]),
                                               attached_h=human_size(more["attached_size"])),
                   left_out=[dict(a, size_h=human_size(a.get("size")))
                             for a in man.get("left_out", [])])
    return {
        "headline": subject(v).removeprefix("[gpualert] "),
        "status_word": status_word(v),
        "failed": v.failed_or_silent,
        "silent": v.silent_failure,
        "job_id": v.job_id,
        "cls": cls,
        "label": labels().get(cls, cls),
        "domain": c.domain or "unknown",
        "confidence": float(c.confidence or 0.0),
        "hint": c.hint or "",
        "detail": c.detail or "",
        "root_rank": c.root_rank,
        "root_node": c.root_node,
        "root_step": c.root_step,
        "evidence": evidence,
        "cascades": cascades,
        "rank_groups": ranks.rank_groups(v, labels()),
        "timeline_cid": timeline.CID if timeline.CID in cids else None,
        "facts": facts,
        "last_lines": last,
        "manifest": man,
        "notes": ranks.group_node_notes(list(v.notes)),
        "recovery": _recovery_lines(v),
        "logs_dir": v.logs_dir or os.path.join(base, "tasks"),
        "page_url": page_url(url, v),
    }


def _recovery_lines(v: VerdictRecord) -> list[str]:
    """What recovery did, does or would do, and why (verdict.json's "recovery"): the job
    epilog decides before it mails, so the mail has the decision and `gpualert show` the
    outcome of its actions."""
    from gpualert_slurm.report.recovery_lines import report_lines

    try:
        return report_lines(v.recovery)
    except (AttributeError, TypeError, KeyError):  # a record of another version: not shown
        return []


def render(v: dict[str, Any], fmt: str = "text", cids: tuple[str, ...] = (),
           kind: str = "report", url: str | None = None) -> str:
    """The report of one job as 'text' or 'html'; `cids`: the inline pictures the message
    carries (inline_images), which the HTML part then shows; `kind`: "report", or "fallback"
    for the least report the job epilog sends when its analysis failed (docs/TEMPLATES.md);
    `url`: the config's report.url (the mail links to the job's web page)."""
    ext = {"text": "txt", "html": "html"}[fmt]
    name = {"report": "report", "fallback": "fallback"}[kind]
    return get_template(f"{name}.{ext}.j2").render(r=context(v, tuple(cids), url))


def inline_images(v: VerdictRecord | Mapping[str, Any]) -> list[tuple[str, bytes, str]]:
    """(Content-ID, data, mime) of the pictures for the HTML part: the timeline of a
    multi-node failure; [] otherwise or when it cannot be drawn."""
    from gpualert_slurm.report import timeline

    return timeline.inline_images(v)


def render_array(a: dict[str, Any], fmt: str = "text") -> str:
    name = {"text": "array.txt.j2", "html": "array.html.j2"}[fmt]
    return get_template(name).render(a=a)


def build_message(subject_text: str, text: str, html: str, *, sender: str,
                  recipients: list[str], attachments: list[tuple[str, bytes, str]] = (),
                  job_id: str = "", inline: list[tuple[str, bytes, str]] = (),
                  job_user: str = "") -> EmailMessage:
    """multipart/mixed: multipart/alternative (text, html) then the attachments
    (filename, data, mime type); `inline` pictures (Content-ID, data, mime) go with the HTML
    part in a multipart/related, shown where it says src="cid:<id>"."""
    msg = EmailMessage()
    msg["Subject"] = header_text(subject_text, 200)
    # whose job it is, in every mail client's From line: the report carries the job's own text
    msg["From"] = (formataddr((header_text(f"gpualert: job {job_id} of {job_user}", 80), sender))
                   if job_user and job_id else sender)
    msg["To"] = ", ".join(recipients)
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    if job_id:
        msg["X-Gpualert-Job"] = header_text(job_id, 40)
    if job_user:
        msg["X-Gpualert-Job-User"] = header_text(job_user, 64)
    msg.set_content(text)
    msg.add_alternative(html, subtype="html")
    if inline:
        html_part = msg.get_body(("html",))
        for cid, data, mime in inline:
            maintype, _, subtype = mime.partition("/")
            html_part.add_related(data, maintype=maintype, subtype=subtype, cid=f"<{cid}>",
                                  disposition="inline", filename=cid.split("@")[0] + ".png")
    for filename, data, mime in attachments:
        maintype, _, subtype = mime.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype or "octet-stream",
                           filename=header_text(filename, 120).replace("/", "_"))
    return msg
