"""The site's own attribution command: the verdict as JSON on stdin, an amended verdict on
stdout, within a time bound. It may confirm or overrule the built-in verdict (class, domain,
root node, evidence); anything else it prints is ignored. When it fails, times out or prints
garbage, the built-in verdict stands and the audit log says why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

from gpualert_slurm.core.classes import class_domains
from gpualert_slurm.core.verdict import Cause, VerdictError, VerdictRecord

AMENDABLE = ("class", "domain", "root_node", "root_rank", "evidence", "detail", "hint")
MAX_OUTPUT = 1024 * 1024


def attribute(argv: tuple[str, ...], verdict: VerdictRecord, timeout_s: float
              ) -> tuple[VerdictRecord, dict[str, Any]]:
    """(the verdict to decide on, what happened: {"status", "detail", "changed"}). The command
    sees verdict.json's record; what it answers is checked as verdict.json's "verdict" is."""
    if not argv:
        return verdict, {"status": "none"}
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as e:
        return verdict, {"status": "failed", "detail": f"cannot run {argv[0]}: {e}"}
    try:
        out, err = proc.communicate(json.dumps(verdict.to_json(), default=str).encode(),
                                    timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # its whole process group: a shell script's children must not outlive the bound
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        return verdict, {"status": "timeout", "detail": f"no answer within {timeout_s:g} s"}
    except OSError as e:  # it closed stdin early and died
        proc.kill()
        proc.wait()
        return verdict, {"status": "failed", "detail": f"{argv[0]}: {e}"}
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-300:]
        return verdict, {"status": "failed",
                         "detail": f"exit status {proc.returncode}" + (f": {tail}" if tail else "")}
    if len(out) > MAX_OUTPUT:
        return verdict, {"status": "garbage", "detail": f"output over {MAX_OUTPUT} bytes"}
    try:
        amended = json.loads(out)
    except ValueError as e:
        return verdict, {"status": "garbage", "detail": f"output is not JSON ({e}): "
                         f"{out[:120]!r}"}
    new = amended.get("verdict") if isinstance(amended, dict) else None
    if not isinstance(new, dict) or new.get("class") not in class_domains():
        return verdict, {"status": "garbage", "detail": "output has no verdict.class naming a "
                         f"known class: {out[:120]!r}"}
    old = verdict.cause.to_json()
    merged = dict(old)
    changed = {}
    for k in AMENDABLE:
        if k in new and new[k] != old.get(k):
            merged[k] = new[k]
            changed[k] = [old.get(k), new[k]]
    if "class" in changed and "domain" not in new:
        merged["domain"] = class_domains()[merged["class"]]
    try:
        cause = Cause.from_json(merged, "the attribution's verdict")
    except VerdictError as e:
        return verdict, {"status": "garbage", "detail": str(e)[:300]}
    status = "amended" if changed else "confirmed"
    return verdict.replace(cause=cause), {"status": status, "changed": changed}
