"""The report end to end through the job epilog (root subprocesses, a temporary spool made by
the real Prolog, a real SMTP server): the mail's parts, subject, attachments and manifest;
header injection through the job name; notify=fail/always/never; the HTML part rendered in
headless Chromium (screenshot kept with the test output and copied to docs/)."""

import email
import email.policy
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_epilog import JOB, NCCL, OOM, hook, site_cfg, write_task
from test_prolog import USER, make_env, prolog

from gpualert_slurm.report import header_text, render, subject

REPO = Path(__file__).resolve().parent.parent


def run_job(spool, cfg, workdir, opts="mail=owner@lab.org", exit2="1:0", logs=None,
            jobid=JOB, **extra):
    env = make_env(cfg, jobid=jobid, SLURM_JOB_NODELIST="n[1-2]", SPANK_GPUALERT=opts,
                   SLURM_JOB_WORK_DIR=str(workdir), **extra)
    assert prolog(env).returncode == 0
    for (step, rank, node, text, code) in logs or [("0", 0, "n1", NCCL, 1),
                                                   ("0", 1, "n2", OOM, 1)]:
        write_task(spool, jobid, step, rank, text, node, exit_code=code)
    for n in ("n1", "n2"):
        assert hook("epilog", dict(env, SLURMD_NODENAME=n, SLURM_JOB_EXIT_CODE2=exit2)
                    ).returncode == 0
    t0 = time.monotonic()
    r = hook("epilog-slurmctld", dict(env, SLURM_JOB_EXIT_CODE2=exit2))
    assert r.returncode == 0
    return json.loads((spool / jobid / "verdict.json").read_text()), time.monotonic() - t0


@pytest.fixture
def workdir():
    # Not under pytest's tmp dir (root's, 0700): the job's user must be able to reach it.
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="gpualert-report-"))
    top.chmod(0o755)
    w = top / "work"
    w.mkdir()
    os.chown(w, USER.pw_uid, USER.pw_gid)
    yield w
    shutil.rmtree(top, ignore_errors=True)


def user_file(path, data, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    os.chown(path, USER.pw_uid, USER.pw_gid)


def decoded(path) -> bytes:
    """Every part of a stored message, decoded (base64/QP), gzip attachments unpacked: what a
    reader of the mail can see, to search for what must not be there."""
    import email
    import email.policy
    import gzip as _gzip

    m = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    out = [bytes(str(m), "utf-8", "replace")]
    for part in m.walk():
        data = part.get_payload(decode=True)
        if data:
            if (part.get_filename() or "").endswith(".gz"):
                data = _gzip.decompress(data)
            out.append(data)
    return b"\n".join(out)


def parse(path):
    return email.message_from_bytes(path.read_bytes(), policy=email.policy.default)


def test_failing_job_mail_has_both_parts_attachments_and_manifest(tmp_path, smtp_server,
                                                                  workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    user_file(workdir / "metrics.json", b'{"loss": 1.5}\n')
    user_file(workdir / "ckpt" / "big.pt", os.urandom(300 * 1024))
    v, took = run_job(spool, cfg, workdir,
                      opts="mail=owner@lab.org,artifacts=metrics.json:ckpt/*.pt,budget=100K",
                      SLURM_JOB_NAME="train-llama")
    assert v["report"]["status"] == "sent", v["report"]
    msgs = smtp_server.messages()
    assert len(msgs) == 1
    m = parse(msgs[0])
    assert m["Subject"] == (f"[gpualert] FAILED job {JOB} (train-llama): CUDA out of memory "
                            "on n2, rank 1")
    assert m["To"] == "owner@lab.org"
    body = m.get_body(("plain",)).get_content()
    html = m.get_body(("html",)).get_content()
    assert "rank 1 on n2" in body and "0.1.log:4" in body and "torch.OutOfMemoryError" in body
    assert "Exit code" in body and "FAILED (reason" in body
    assert "<b>rank 1</b> on <b>n2</b>" in html
    names = sorted(p.get_filename() for p in m.iter_attachments())
    assert names == ["0.0.log.gz", "0.1.log.gz", "metrics.json"]
    # the checkpoint did not fit: named with size, reason and where it stays
    left = v["artifacts"]["left_out"]
    assert [x["name"] for x in left] == ["ckpt/big.pt"]
    assert left[0]["size"] == 300 * 1024 and "budget" in left[0]["reason"]
    assert left[0]["where"] == str(workdir / "ckpt" / "big.pt")
    assert "ckpt/big.pt (300.0 KiB): over the budget" in body
    assert v["artifacts"]["used"] <= 100 * 1024


def test_job_name_cannot_inject_headers(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    evil = "x\r\nBcc: thief@evil.org\r\nX-Injected: 1\u2028Cc: a@b.c"
    v, _ = run_job(spool, cfg, workdir, SLURM_JOB_NAME=evil)
    m = parse(smtp_server.messages()[0])
    assert m["Bcc"] is None and m["X-Injected"] is None and m["Cc"] is None
    assert "\n" not in m["Subject"] and "Bcc: thief@evil.org" in m["Subject"]
    raw = smtp_server.messages()[0].read_bytes()
    assert b"\nBcc:" not in raw and b"\nX-Injected" not in raw
    assert header_text(evil) == "x Bcc: thief@evil.org X-Injected: 1 Cc: a@b.c"


def test_success_mails_only_with_notify_always(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    ok = [("0", 0, "n1", "epoch 1 loss 0.5\ndone\n", 0), ("0", 1, "n2", "done\n", 0)]
    v, _ = run_job(spool, cfg, workdir, exit2="0:0", logs=ok, jobid="987650011")
    assert not v["failed"] and "report" not in v and smtp_server.messages() == []
    v, _ = run_job(spool, cfg, workdir, opts="mail=owner@lab.org,notify=always", exit2="0:0",
                   logs=ok, jobid="987650012")
    assert v["report"]["status"] == "sent"
    m = parse(smtp_server.messages()[0])
    assert m["Subject"].startswith("[gpualert] COMPLETED job 987650012")
    v, _ = run_job(spool, cfg, workdir, opts="mail=owner@lab.org,notify=never",
                   jobid="987650013")
    assert v["failed"] and "report" not in v and len(smtp_server.messages()) == 1


def test_silent_failure_is_reported_and_says_so(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    nan = ("step 100 loss 2.31\nstep 200 loss nan\n"
           "RuntimeError: Loss is NaN at step 200, stopping training\n")
    v, _ = run_job(spool, cfg, workdir, exit2="0:0",
                   logs=[("0", 0, "n1", nan, 0), ("0", 1, "n2", "step 200\n", 0)])
    assert not v["failed"] and v["silent_failure"], v["verdict"]
    m = parse(smtp_server.messages()[0])
    assert "silent failure" in m["Subject"] and "FAILED" in m["Subject"]


def test_relay_down_report_waits_in_the_outbox(tmp_path, workdir):
    spool, cfg = site_cfg(tmp_path, "127.0.0.1:9")  # discard port: nothing listens
    v, took = run_job(spool, cfg, workdir)
    assert v["report"]["status"] == "queued", v["report"]
    outbox = list((spool / ".outbox").rglob("*.eml")) or list((spool / ".outbox").rglob("*"))
    assert any(p.is_file() and JOB in p.read_text(errors="replace") for p in outbox)
    assert took < 3 + 15


def test_symlink_artifact_to_root_only_file_is_not_attached(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    secret = tmp_path / "shadow-like"
    secret.write_text("ROOT-ONLY-SECRET\n")
    secret.chmod(0o600)
    (workdir / "out").mkdir()
    os.chown(workdir / "out", USER.pw_uid, USER.pw_gid)
    os.symlink(secret, workdir / "out" / "result.txt")
    os.lchown(workdir / "out" / "result.txt", USER.pw_uid, USER.pw_gid)
    # a user-owned file outside the work dir, reached through a symlink: refused too
    outside = tmp_path / "elsewhere.txt"
    user_file(outside, b"OUTSIDE-THE-JOB\n")
    os.symlink(outside, workdir / "out" / "other.txt")
    os.lchown(workdir / "out" / "other.txt", USER.pw_uid, USER.pw_gid)
    user_file(workdir / "out" / "fine.txt", b"FINE\n")
    v, _ = run_job(spool, cfg, workdir, opts="mail=owner@lab.org,artifacts=out/*")
    raw = decoded(smtp_server.messages()[0])
    assert b"FINE" in raw  # decoding works: the allowed file's content is found
    assert b"ROOT-ONLY-SECRET" not in raw and b"OUTSIDE-THE-JOB" not in raw
    m = parse(smtp_server.messages()[0])
    assert "out_fine.txt" in [p.get_filename() for p in m.iter_attachments()]
    reasons = {x["name"]: x["reason"] for x in v["artifacts"]["left_out"]}
    assert "refused" in reasons["out/result.txt"] and "refused" in reasons["out/other.txt"]


def test_unreadable_artifact_is_read_as_the_user(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    f = workdir / "root.txt"
    f.write_text("ROOT-OWNED-IN-WORKDIR\n")
    f.chmod(0o600)  # root's file inside the user's dir: the user cannot read it
    v, _ = run_job(spool, cfg, workdir, opts="mail=owner@lab.org,artifacts=*.txt")
    assert b"ROOT-OWNED-IN-WORKDIR" not in decoded(smtp_server.messages()[0])
    assert "as the job's user" in v["artifacts"]["left_out"][0]["reason"]


def test_huge_log_is_cut_to_head_and_tail_with_a_note(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    big = "".join(f"step {i} loss {i % 7}.0 {os.urandom(24).hex()}\n" for i in range(120000))
    v, _ = run_job(spool, cfg, workdir, opts="mail=owner@lab.org,budget=3M",
                   logs=[("0", 0, "n1", big + NCCL, 1), ("0", 1, "n2", OOM, 1)])
    att = {a["name"]: a for a in v["artifacts"]["attached"]}
    assert "cut to its first and last" in att["0.0.log.gz"]["note"]
    m = parse(smtp_server.messages()[0])
    import gzip

    part = next(p for p in m.iter_attachments() if p.get_filename() == "0.0.log.gz")
    text = gzip.decompress(part.get_content()).decode()
    assert "bytes cut here; the whole log is" in text and text.startswith("step 0 loss")
    assert text.rstrip().endswith(NCCL.strip().splitlines()[-1])


def test_render_uses_site_template_override(tmp_path, monkeypatch):
    v = {"job_id": "5", "failed": True, "job": {"name": "n"},
         "verdict": {"class": "cuda_oom", "root_rank": 2, "root_node": "g1", "hint": "h"}}
    d = tmp_path / "tpl"
    d.mkdir()
    (d / "report.txt.j2").write_text("SITE {{ r.label }} {{ r.root_node }}\n")
    monkeypatch.setenv("GPUALERT_TEMPLATES", str(d))
    assert render(v, "text") == "SITE CUDA out of memory g1\n"
    assert "<!DOCTYPE html>" in render(v, "html")  # not overridden: the packaged one
    assert subject(v) == "[gpualert] FAILED job 5 (n): CUDA out of memory on g1, rank 2"


def as_a_mail_client_shows(msg: email.message.EmailMessage) -> str:
    """The HTML part with every cid: reference resolved to its inline part (a data: URI), as a
    mail client shows it; an unresolved reference fails (it would be a broken picture)."""
    import base64
    import re

    html = msg.get_body(("html",)).get_content()
    parts = {str(p["Content-ID"]).strip("<>"): p for p in msg.walk() if p["Content-ID"]}

    def inline(m: re.Match[str]) -> str:
        part = parts.get(m.group(1))
        assert part is not None, f"cid:{m.group(1)} names no part of the message"
        data = base64.b64encode(part.get_payload(decode=True)).decode()
        return f"data:{part.get_content_type()};base64,{data}"

    return re.sub(r"cid:([^\"'\s)]+)", inline, html)


def test_html_report_renders_in_chromium(tmp_path, smtp_server, workdir):
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium package is missing: run scripts/install.sh"
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    user_file(workdir / "metrics.json", b'{"loss": 1.5}\n')
    user_file(workdir / "ckpt" / "step-2000.pt", os.urandom(200 * 1024))
    run_job(spool, cfg, workdir,
            opts="mail=owner@lab.org,artifacts=metrics.json:ckpt/*.pt,budget=150K",
            SLURM_JOB_NAME="train-llama")
    html = as_a_mail_client_shows(parse(smtp_server.messages()[0]))
    page = tmp_path / "report.html"
    page.write_text(html)
    shot = tmp_path / "report.png"
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=900,1300",
                        f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (w, h) == (900, 1300)
    # something was drawn: the PNG of a blank page compresses to a few KB
    assert len(data) > 30_000, len(data)
    docs = REPO / "docs" / "report-example.png"
    shutil.copyfile(shot, docs)


def test_spool_full_report_still_delivered(tmp_path, smtp_server, workdir):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], check=True)
    try:
        spool, cfg = site_cfg(small, f"127.0.0.1:{smtp_server.port}")
        env = make_env(cfg, jobid=JOB, SLURM_JOB_NODELIST="n[1-2]",
                       SPANK_GPUALERT="mail=owner@lab.org", SLURM_JOB_WORK_DIR=str(workdir))
        assert prolog(env).returncode == 0
        write_task(spool, JOB, "0", 0, NCCL, "n1", exit_code=1)
        write_task(spool, JOB, "0", 1, OOM, "n2", exit_code=1)
        with open(small / "filler", "wb") as f:  # fill the spool's filesystem
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        for n in ("n1", "n2"):
            assert hook("epilog", dict(env, SLURMD_NODENAME=n, SLURM_JOB_EXIT_CODE2="1:0")
                        ).returncode == 0
        t0 = time.monotonic()
        r = hook("epilog-slurmctld", dict(env, SLURM_JOB_EXIT_CODE2="1:0"))
        assert r.returncode == 0 and time.monotonic() - t0 < 3 + 15 + 5
        assert "cannot write verdict.json" in r.stderr or "No space" in r.stderr, r.stderr
        m = parse(smtp_server.messages()[0])
        assert m["Subject"].startswith(f"[gpualert] FAILED job {JOB}")
        assert "CUDA out of memory on n2, rank 1" in m["Subject"]
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_broken_site_rules_still_classify(tmp_path, smtp_server, workdir, monkeypatch):
    rules = tmp_path / "rules.d"
    rules.mkdir()
    (rules / "bad.yaml").write_text("rules:\n  - id: broken\n    class: no_such_class\n")
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(rules))
    env_extra = {"GPUALERT_RULES_DIR": str(rules)}
    v, _ = run_job(spool, cfg, workdir, **env_extra)
    assert v["verdict"]["class"] == "cuda_oom"
    assert "site rules ignored" in v["verdict"]["detail"]
    assert v["report"]["status"] == "sent"


def test_array_per_task_mode_names_the_parent_and_caps_per_array(tmp_path, smtp_server,
                                                                 workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}",
                          "report:\n  arrays: per_task\n  max_per_array: 1\n")
    arr = {"SLURM_ARRAY_JOB_ID": "987650500"}
    v1, _ = run_job(spool, cfg, workdir, jobid="987650501", SLURM_ARRAY_TASK_ID="1",
                    SLURM_JOB_NAME="sweep", **arr)
    v2, _ = run_job(spool, cfg, workdir, jobid="987650502", SLURM_ARRAY_TASK_ID="2", **arr)
    assert v1["report"]["status"] == "sent"
    assert v2["report"]["status"] == "not sent" and "per array" in v2["report"]["reason"]
    (m,) = [parse(p) for p in smtp_server.messages()]
    assert m["Subject"].startswith("[gpualert] FAILED job 987650500_1 (sweep): CUDA out of")


def test_per_user_cap_per_hour(tmp_path, smtp_server, workdir):
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}",
                          "report:\n  max_per_user_hour: 1\n")
    v1, _ = run_job(spool, cfg, workdir, jobid="987650601")
    v2, _ = run_job(spool, cfg, workdir, jobid="987650602")
    assert v1["report"]["status"] == "sent"
    assert v2["report"]["status"] == "not sent" and "per user per hour" in v2["report"]["reason"]
    assert len(smtp_server.messages()) == 1
    # the report is not lost for the user: it is in verdict.json, `gpualert show` prints it
    assert v2["verdict"]["class"] == "cuda_oom"


def test_html_part_escapes_what_the_job_wrote():
    v = {"job_id": "7", "failed": True, "job": {"name": "<script>alert(1)</script>"},
         "verdict": {"class": "python_exception", "hint": "h",
                     "evidence": [{"file": "f.log", "line": 3,
                                   "text": "ValueError: <img src=x onerror=alert(2)>"}]},
         "last_lines": {"file": "f.log", "lines": ["</pre><b>bold</b>"]}}
    html = render(v, "html")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<img" not in html and "</pre><b>" not in html
    text = render(v, "text")
    assert "ValueError: <img src=x onerror=alert(2)>" in text  # plain text stays verbatim


def test_report_cut_short_is_finished_by_a_later_job_epilog(tmp_path, smtp_server, workdir):
    # Job B's epilog sweeps only with time to spare (Budget.spare: twice its reserve left); the
    # site's bound is raised so that a loaded test machine (a 6 s epilog) still leaves it some.
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}", hook_timeout_s=40)
    # job A: its epilog wrote verdict.json and was killed before the mail (as an overloaded
    # controller's watchdog does): the marker it left stays behind
    v, _ = run_job(spool, cfg, workdir, opts="mail=owner@lab.org,notify=never",
                   jobid="987650701")
    v.pop("report", None)
    v["options"]["notify"] = "fail"
    (spool / "987650701" / "verdict.json").write_text(json.dumps(v))
    pending = spool / ".gpualert" / "pending"
    env = {"SLURM_JOB_ID": "987650701", "SLURM_JOB_USER": USER.pw_name,
           "SPANK_GPUALERT": "mail=owner@lab.org", "SLURM_JOB_EXIT_CODE2": "1:0"}
    (pending / "987650701.json").write_text(json.dumps(
        {"job_id": "987650701", "uid": USER.pw_uid, "attempt": 0,
         "since": time.time() - 600, "tries": 0, "env": env}))
    assert smtp_server.messages() == []
    # job B's epilog has time to spare: it finishes A's report, then its own is sent too
    run_job(spool, cfg, workdir, jobid="987650702", GPUALERT_HOOK_TIMEOUT="60")
    subjects = sorted(parse(p)["Subject"] for p in smtp_server.messages())
    assert len(subjects) == 2 and any("job 987650701" in s for s in subjects), subjects
    assert not (pending / "987650701.json").exists()
    assert not (pending / "987650702.json").exists()
    done = json.loads((spool / "987650701" / "verdict.json").read_text())
    assert done["report"]["status"] == "sent"
    assert any("finished later" in n for n in done["notes"])


def test_recovery_decision_is_in_the_report_when_recorded():
    """verdict.json's "recovery" (written by the job epilog after the policy decided) shows in
    the text and HTML reports, as `gpualert show` prints them."""
    from gpualert_slurm.report import render

    v = {"job_id": "77", "failed": True,
         "verdict": {"class": "node_failure", "domain": "infrastructure", "root_node": "n2"},
         "recovery": {"mode": "monitor", "would": [
             {"action": "drain_node", "target": "n2"},
             {"action": "requeue", "target": "77", "hold": False}]}}
    text, html = render(v, "text"), render(v, "html")
    assert "Recovery: In action mode gpualert would drain node n2." in text
    assert "Recovery: In action mode gpualert would drain node n2." in html
    assert "Recovery:" not in render(dict(v, recovery=None), "text")


def test_192_rank_report_groups_ranks_and_shows_the_timeline_in_chromium(tmp_path, smtp_server,
                                                                         workdir):
    """A 192-rank job over 48 nodes, rank 137 failing first and srun terminating the rest:
    the report lists the root rank and one group for the 191 others (never 192 lines), the
    HTML part carries the timeline PNG inline (Content-ID, bounded), and Chromium renders it
    as a mail client does (cid: resolved to the part)."""

    from matplotlib.image import imread

    from gpualert_slurm.report import timeline

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium package is missing: run scripts/install.sh"
    spool, cfg = site_cfg(tmp_path, f"127.0.0.1:{smtp_server.port}")
    jobid = "4192"
    env = make_env(cfg, jobid=jobid, SLURM_JOB_NODELIST="n[1-48]",
                   SPANK_GPUALERT="mail=owner@lab.org", SLURM_JOB_WORK_DIR=str(workdir),
                   SLURM_JOB_NAME="pretrain-192")
    assert prolog(env).returncode == 0
    write_task(spool, jobid, "0", 137, "step 4 loss=2.4\n" + OOM.replace("rank 1", "rank 137"),
               "n35", exit_code=1)
    time.sleep(0.3)  # the others end after it, as srun's kill makes them
    for r in range(192):
        if r != 137:
            write_task(spool, jobid, "0", r, f"[rank {r}] step 4 loss=2.4\n", f"n{r // 4 + 1}",
                       exit_code=0, signal=15)
    assert hook("epilog-slurmctld", dict(env, SLURM_JOB_EXIT_CODE2="1:0")).returncode == 0
    v = json.loads((spool / jobid / "verdict.json").read_text())
    assert (v["verdict"]["root_rank"], v["verdict"]["root_node"]) == (137, "n35")
    msg = parse(smtp_server.messages()[0])
    text = msg.get_body(("plain",)).get_content()
    assert "root: rank 137 on n35: CUDA out of memory, exited 1" in text, text
    assert ("191 ranks (0-136,138-191) on n[1-48]: terminated by SIGTERM (srun or Slurm ending "
            "the step), after rank 137 failed") in text, text
    assert "Cascades" not in text and len(text.splitlines()) < 90, text
    assert "186 more task logs" in text, text  # 192 logs, 6 by name
    html_part = msg.get_body(("html",))
    html = html_part.get_content()
    assert f'src="cid:{timeline.CID}"' in html
    pics = [p for p in msg.walk() if p.get_content_type() == "image/png"]
    assert len(pics) == 1 and pics[0]["Content-ID"] == f"<{timeline.CID}>"
    png = pics[0].get_payload(decode=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(png) <= timeline.MAX_BYTES
    # the root rank's star is drawn (its red), and the picture is one row per node
    img = imread(__import__("io").BytesIO(png))
    red = ((abs(img[..., 0] - 0xb4 / 255) < 0.03) & (abs(img[..., 1] - 0x23 / 255) < 0.03)
           & (abs(img[..., 2] - 0x18 / 255) < 0.03)).sum()
    assert red > 50, red
    assert 600 < img.shape[0] < 1000 and img.shape[1] < 700, img.shape
    page = tmp_path / "report-192.html"
    page.write_text(as_a_mail_client_shows(msg))
    shot = tmp_path / "report-192.png"
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=900,1800",
                        f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    got = imread(str(shot))
    assert got.shape[:2] == (1800, 900)
    # the timeline is on the page: its root-star red appears in the screenshot too
    red = ((abs(got[..., 0] - 0xb4 / 255) < 0.03) & (abs(got[..., 1] - 0x23 / 255) < 0.03)
           & (abs(got[..., 2] - 0x18 / 255) < 0.03))
    assert red[700:].sum() > 50, "no timeline below the header"
    shutil.copyfile(shot, REPO / "docs" / "report-192-ranks.png")


def test_timeline_only_for_multi_node_failures():
    from gpualert_slurm.report import inline_images, timeline

    one = {"failed": True, "verdict": {"root_rank": 0},
           "tasks": [{"step": "0", "rank": r, "node": "n1", "end_time": 10.0 + r,
                      "exit_code": 1} for r in range(8)]}
    assert not timeline.wanted(one) and inline_images(one) == []
    two = dict(one, tasks=one["tasks"] + [{"step": "0", "rank": 8, "node": "n2",
                                          "end_time": 19.0, "exit_code": 1}])
    assert timeline.wanted(two) and inline_images(two)[0][0] == timeline.CID
    assert not timeline.wanted(dict(two, failed=False))
