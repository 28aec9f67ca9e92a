"""The web pages over jobs that really ran on the native test cluster (the shared one): a
CUDA-OOM-like Python failure, a time limit, a job array with one failed task, and a job of a
second user. Headless Chromium loads the list and the job pages from `gpualert web` and from
Passenger (ood/gpualert/passenger_wsgi.py), each run as user A: every one of A's jobs is
there with its class, B's job is not, and B's job page is a 404. The screenshots go to docs/.
The node loss and the requeue with its recovery decision need the recovery cluster (killing a
slurmd): tests/test_web_recovery_cluster.py."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import clusterlib as cl
import pytest
import weblib
from weblib import OTHER_USER

from gpualert_slurm.report import labels

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parent.parent
SECRET_B = "SECRET-OF-USER-B-ON-THE-CLUSTER"
OOM = """#!/bin/bash
#SBATCH --gpualert=mail=gpatest@localhost
#SBATCH -J train-llama
python3 - <<'PY'
import sys, time
for step in range(1, 40):
    print(f"step {step} | loss {3.2 - step * 0.01:.4f} | lr 3.0e-04", flush=True)
print('Traceback (most recent call last):', file=sys.stderr)
print('  File "train.py", line 88, in <module>', file=sys.stderr)
print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; '
      '79.15 GiB total capacity; 77.02 GiB already allocated)', file=sys.stderr, flush=True)
sys.exit(1)
PY
"""
TIMEOUT = """#!/bin/bash
#SBATCH --gpualert=mail=gpatest@localhost
#SBATCH -J long-eval --time=1
for i in $(seq 1 400); do echo "eval batch $i"; sleep 1; done
"""
ARRAY = """#!/bin/bash
#SBATCH --gpualert=mail=gpatest@localhost
#SBATCH -J sweep --array=0-2
echo "task $SLURM_ARRAY_TASK_ID: lr sweep"
if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then
  echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB' >&2; exit 1
fi
"""
PLAIN = """#!/bin/bash
#SBATCH -J unmonitored
exit 4
"""
OTHER = f"""#!/bin/bash
#SBATCH --gpualert=mail={OTHER_USER}@localhost
#SBATCH -J {SECRET_B}
echo '{SECRET_B}'
exit 3
"""


def _verdict(cluster: cl.ClusterFacts, job: int, timeout: float = 300) -> dict:
    path = cluster.spool / str(job) / "verdict.json"

    def ready() -> dict | None:
        try:
            v = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return v if "report" in v else None

    return cl.wait_until(ready, timeout, f"{path} with its report",
                         diagnose=lambda: cl.diagnostics(job))


def _array_tasks(cluster: cl.ClusterFacts, array: int, n: int, timeout: float = 300
                 ) -> dict[int, dict]:
    """task id -> verdict of each of the array's tasks (each has its own job id)."""
    def ready() -> dict[int, dict] | None:
        got = {}
        for d in cluster.spool.iterdir():
            if not d.name.isdigit() or int(d.name) < array:
                continue
            try:
                v = json.loads((d / "verdict.json").read_text())
            except (OSError, ValueError):
                continue
            if (v.get("array") or {}).get("job_id") in (array, str(array)) and "report" in v:
                got[int(v["array"]["task_id"])] = v
        return got if len(got) == n else None

    return cl.wait_until(ready, timeout, f"the {n} verdicts of array {array}",
                         diagnose=lambda: cl.diagnostics(array))


@pytest.fixture(scope="module")
def ran(cluster: cl.ClusterFacts) -> dict:
    """The jobs, submitted together, each waited for until its report is done."""
    weblib.ensure_user(OTHER_USER)
    d = cl.make_workdir(cluster, "web")
    d_b = cl.make_workdir(cluster, "web-b", user=OTHER_USER)
    jobs = {"timeout": cl.submit(TIMEOUT, workdir=d, name="eval.sh"),
            "oom": cl.submit(OOM, workdir=d, name="train.sh"),
            "array": cl.submit(ARRAY, workdir=d, name="sweep.sh"),
            "other": cl.submit(OTHER, workdir=d_b, name="b.sh", user=OTHER_USER),
            "plain": cl.submit(PLAIN, workdir=d, name="plain.sh")}
    try:
        out = {"jobs": jobs, "verdicts": {k: _verdict(cluster, j) for k, j in jobs.items()
                                          if k not in ("array", "plain")}}
        cl.wait_final(jobs["plain"])
        out["tasks"] = _array_tasks(cluster, jobs["array"], 3)
    except BaseException:
        cl.cancel_quietly(*jobs.values())
        raise
    return out


@pytest.fixture(scope="module", params=["gpualert-web", "passenger"])
def url(request, cluster: cl.ClusterFacts, ran: dict):
    serve = weblib.gpualert_web if request.param == "gpualert-web" else weblib.passenger
    with serve(cl.TEST_USER, cluster.gpualert_config) as base:
        weblib.wait_up(base + "/")
        yield base


def test_the_list_in_chromium_has_each_job_of_the_user_and_not_the_others(url, ran) -> None:
    dom = weblib.chromium_dom(url + "/")
    jobs, verdicts = ran["jobs"], ran["verdicts"]
    for kind in ("oom", "timeout"):
        v = verdicts[kind]
        assert f'href="/job/{jobs[kind]}"' in dom, kind
        assert labels().get(v["verdict"]["class"], v["verdict"]["class"]) in dom, kind
    assert f"array {jobs['array']}" in dom and "3 tasks, 1 failed" in dom
    assert str(jobs["other"]) not in dom and SECRET_B not in dom


def test_the_list_adds_what_accounting_still_knows(url, ran) -> None:
    """A job gpualert never monitored has no spool dir: accounting (sacct -u, as the user)
    still lists it on demand, and says it cannot tell which kind of gone it is."""
    jobs = ran["jobs"]
    plain = str(jobs["plain"])
    status, _h, body = weblib.get(url + "/")
    assert status == 200 and f"/job/{plain}" not in body.decode()
    status, _h, body = weblib.get(url + "/?past=1")
    page = body.decode()
    past = page.split("no longer in the spool", 1)[1]
    assert status == 200 and f"<td>{plain}</td><td>FAILED</td><td>4:0</td>" in past, past[:3000]
    assert f"<td>{jobs['oom']}</td>" not in past  # in the spool: listed above, not here
    assert str(jobs["other"]) not in past  # user B's: sacct -u is the user's own


def test_job_pages_in_chromium_show_the_verdict_evidence_and_logs(url, ran) -> None:
    jobs, verdicts = ran["jobs"], ran["verdicts"]
    oom = weblib.chromium_dom(f"{url}/job/{jobs['oom']}")
    assert verdicts["oom"]["verdict"]["class"] == "cuda_oom"
    hint = html.escape(verdicts["oom"]["verdict"]["hint"], quote=False)[:40]
    assert "CUDA out of memory" in oom and hint in oom, hint
    assert f"/job/{jobs['oom']}/0/log/" in oom and "?line=" in oom  # evidence -> the viewer
    tl = weblib.chromium_dom(f"{url}/job/{jobs['timeout']}")
    cls = verdicts["timeout"]["verdict"]["class"]
    assert verdicts["timeout"]["job"]["slurm_state"] == "TIMEOUT", verdicts["timeout"]["job"]
    assert labels().get(cls, cls) in tl and "eval batch" in tl
    failed_task = ran["tasks"][1]
    page = weblib.chromium_dom(f"{url}/job/{failed_task['job_id']}")
    assert "CUDA out of memory" in page and f"{jobs['array']}_1" in page
    # user B's job: not found for A, by any of its URLs
    for path in (f"/job/{jobs['other']}", f"/job/{jobs['other']}/0/log/batch.0.log",
                 f"/job/{jobs['other']}/0/raw/batch.0.log"):
        status, _h, body = weblib.get(url + path)
        assert status == 404 and SECRET_B.encode() not in body, path


def test_screenshots_for_the_docs(cluster: cl.ClusterFacts, ran, tmp_path) -> None:
    """The pictures README and docs/ show, as Open OnDemand's Passenger serves the pages."""
    jobs = ran["jobs"]
    ev = ran["verdicts"]["oom"]["verdict"]["evidence"][0]
    name = ev["file"].rsplit("/", 1)[1]
    with weblib.passenger(cl.TEST_USER, cluster.gpualert_config) as url:
        weblib.wait_up(url + "/")
        shots = {"web-list.png": f"{url}/",
                 "web-job.png": f"{url}/job/{jobs['oom']}",
                 "web-log.png": f"{url}/job/{jobs['oom']}/0/log/{name}?line={ev['line']}"}
        for fname, page in shots.items():
            out = tmp_path / fname
            weblib.chromium_shot(page, out)
            shutil.copyfile(out, REPO / "docs" / fname)
