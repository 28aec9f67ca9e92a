"""`gpualert hook epilog|epilog-slurmctld`: NOT IMPLEMENTED YET.

They exist so that slurm.conf can already point at the shims: each writes one line to the hooks
log saying it ran and did nothing, and returns 0. Classification, the node verdict, the report,
mail and recovery are later work (see ARCHITECTURE.md steps 4-6)."""

from __future__ import annotations

import os

from gpualert_slurm.hooks.common import HookLog, load_config_logged


def run(which: str) -> int:
    log = HookLog(which)
    try:
        cfg = load_config_logged(log)
        if cfg is not None:
            log.set_spool(cfg.spool)
        log.info(f"job {os.environ.get('SLURM_JOB_ID', '?')}: {which} not implemented yet;"
                 " nothing done")
    except Exception as e:  # a hook never fails
        log.error(f"unexpected error: {e!r}")
    return 0
