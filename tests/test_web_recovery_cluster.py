"""The web page of a job that lost a node and was requeued, on the recovery cluster (its own
native cluster: the test kills a slurmd, which the shared one must never see). In action mode
gpualert drains the lost node and requeues the job; the second run fails on its own. User A's
page, loaded in headless Chromium from `gpualert web`, shows both attempts, the node failure
of the first with what recovery decided and did, and the second run's CUDA OOM."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import clusterlib as cl
import pytest
import weblib
from recoverylib import (
    cancel,
    job_script,
    recovery_cluster,  # noqa: F401  (the fixture)
    start_now_when_pending,
    wait_decision,
    write_config,
)

from gpualert_slurm.core import slurm
from gpualert_slurm.report import labels

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parent.parent
BODY = """if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
  echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB' >&2; exit 1
fi
srun -N2 -n2 bash -c 'touch "running-$SLURM_PROCID"; exec sleep 300'"""


def _report_written(path: Path) -> dict | None:
    try:
        v = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return v if "report" in v else None


def test_requeued_job_after_a_node_loss_shows_each_attempt_and_the_decision(
        rc: cl.ClusterFacts, audit: Path, tmp_path: Path) -> None:
    write_config(rc, audit, mode="action")
    d = cl.make_workdir(rc, "web-nodeloss")
    job, victim = 0, ""
    try:
        job = cl.submit(job_script(BODY), "-N2", "--exclusive", workdir=d)
        cl.wait_until(lambda: all((d / f"running-{r}").exists() for r in (0, 1)), 120,
                      f"job {job} running on two nodes",
                      diagnose=lambda: cl.diagnostics(job, rc.root))
        info = slurm.show_job(job)
        victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
        os.kill(int(rc.slurmd_pidfile(victim).read_text().strip()), signal.SIGKILL)
        dec = wait_decision(audit, job, 0, timeout=120)
        assert dec["class"] == "node_failure" and dec["mode"] == "action", dec
        start_now_when_pending(job, 1)
        second = cl.wait_until(
            lambda: _report_written(rc.spool / str(job) / "attempt-1" / "verdict.json"), 120,
            f"job {job}'s second run reported", diagnose=lambda: cl.diagnostics(job, rc.root))
        first = json.loads((rc.spool / str(job) / "verdict.json").read_text())
        assert first["recovery"], first
        with weblib.gpualert_web(cl.TEST_USER, rc.gpualert_config) as url:
            weblib.wait_up(url + "/")
            latest = weblib.chromium_dom(f"{url}/job/{job}")
            page0 = weblib.chromium_dom(f"{url}/job/{job}/0")
            listing = weblib.chromium_dom(url + "/")
            shot = tmp_path / "web-requeued.png"
            weblib.chromium_shot(f"{url}/job/{job}/0", shot)
        shutil.copyfile(shot, REPO / "docs" / "web-requeued.png")
        # the latest attempt by default: the second run's OOM, and both attempts listed
        assert second["verdict"]["class"] == "cuda_oom", second["verdict"]
        assert "CUDA out of memory" in latest and "Attempts" in latest
        assert f'href="/job/{job}/0"' in latest
        # the first run: the lost node, and what recovery decided and did about it
        assert labels()["node_failure"] in page0 and victim in page0
        assert "drain" in page0 and f"node {victim}" in page0, page0[-4000:]
        assert "requeue" in page0
        assert f'href="/job/{job}"' in listing and ">2<" in listing.replace(" ", "")
    finally:
        cancel(job)
        if victim:
            cl.restore_node(rc, victim)
