/* The tap's task side (tap.c): in the task, as the user, just before exec. */
#ifndef GPUALERT_TAP_H
#define GPUALERT_TAP_H

#include "gpualert.h"
#include "config.h"
#include "handoff.h"
#include "host.h"

#include <slurm/spank.h>

/* Puts the task's stdout and stderr through a copier. Never fails the task (returns 0), never
 * touches the spool: any failure leaves the task as it was, with one slurm_info line. */
int tap_start(spank_t sp, const struct task_id *id, const struct plugin_config *cfg,
              struct host *h, const struct handoff_names *dn);

#endif
