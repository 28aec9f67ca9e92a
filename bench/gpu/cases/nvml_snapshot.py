"""NVML as the node hooks take it (expected: success): the Prolog's snapshot
(core.gpu.gpu_snapshot) before a short GPU workload, the node Epilog's evidence
(core.evidence.nvml_evidence, which takes 'after' and compares) after it, and the same Epilog
call with the NVML library hidden: the absent-GPU path. Writes both records and their keys to
--out, and says whether the two paths give the same schema.

The CPU half does the same without the workload: there, 'as found' is the absent path too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from _common import parser, present, say

# What the issue says the snapshot reads; a key naming each is looked for in a device's record.
ISSUE_FIELDS = {"memory": ("memory",), "ecc": ("ecc",), "retired_or_remapped": ("retired", "remap"),
                "clocks": ("clock",)}

HIDDEN = """import sys
from gpualert_slurm.core.evidence import nvml_evidence
import json
print(json.dumps(nvml_evidence(None)))
"""


def workload() -> str:
    if not present("torch"):
        return "none: torch absent"
    import torch

    if not torch.cuda.is_available():
        return "none: torch sees no GPU"
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(50):
        a = torch.tanh(a @ a / 64)
    torch.cuda.synchronize()
    return f"50 matmuls of 4096x4096 on {torch.cuda.get_device_name(0)}"


def shape(v: Any) -> Any:
    """A record's schema: keys and the type of each value, nested."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    return type(v).__name__


def hidden_nvml_evidence() -> dict[str, Any]:
    """nvml_evidence(None) in a child that cannot import pynvml: the absent-GPU path."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "pynvml.py"), "w") as f:
            f.write('raise ImportError("hidden by bench/gpu for the absent-GPU path")\n')
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [d] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        r = subprocess.run([sys.executable, "-c", HIDDEN], env=env, capture_output=True,
                           text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"the hidden-NVML child failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--out", required=True, help="where to write the JSON record")
    a = p.parse_args()
    from gpualert_slurm.core.evidence import nvml_evidence
    from gpualert_slurm.core.gpu import gpu_snapshot

    before = gpu_snapshot()  # what the Prolog keeps in <node>.prolog.json
    say(f"prolog snapshot: {'present' if isinstance(before, dict) else before}")
    work = "none: cpu half" if a.cpu_half else workload()
    say(f"workload: {work}")
    found = nvml_evidence(before)  # the node Epilog's call
    hidden = hidden_nvml_evidence()
    state = "present" if isinstance(found["after"], dict) else "absent"
    say(f"epilog evidence as found: after {state}, changed {found['changed']}, "
        f"absent {found['absent']!r}")
    say(f"epilog evidence with NVML hidden: absent {hidden['absent']!r}")
    devices = found["after"]["devices"] if isinstance(found["after"], dict) else []
    dev_keys = sorted(devices[0]) if devices else []
    rec = {
        "workload": work,
        "as_found": found,
        "nvml_hidden": hidden,
        "present_path": isinstance(found["after"], dict),
        "keys": {"as_found": sorted(found), "nvml_hidden": sorted(hidden),
                 "device": dev_keys},
        "schema": {"as_found": shape(found), "nvml_hidden": shape(hidden)},
        "same_top_level_keys": sorted(found) == sorted(hidden),
        # which of what the issue names a device record holds (by key name)
        "issue_fields": {name: [k for k in dev_keys if any(w in k for w in words)]
                         for name, words in ISSUE_FIELDS.items()} if dev_keys else None,
    }
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True, default=str)
    say(f"top-level keys: as found {rec['keys']['as_found']}, hidden {rec['keys']['nvml_hidden']}"
        f": {'same' if rec['same_top_level_keys'] else 'DIFFERENT'}")
    if dev_keys:
        say(f"device record keys: {dev_keys}")
    return 0 if rec["same_top_level_keys"] else 1


if __name__ == "__main__":
    sys.exit(main())
