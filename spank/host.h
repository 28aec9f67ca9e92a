/* The copier host (host.c): one process per step, outside the step's cgroup, that starts each
 * task's copier (spank/README.md, "Who starts the copier"). */
#ifndef GPUALERT_HOST_H
#define GPUALERT_HOST_H

#include "gpualert.h"
#include "config.h"

#include <slurm/spank.h>

struct host {
    int sock;                  /* slurmstepd's end (-1: none); inherited by every task forked */
    int tasks_forked;
};

void host_layout_check(const struct plugin_config *cfg);                 /* init_post_opt */
void host_start(spank_t sp, struct host *h, const struct plugin_config *cfg); /* user_init */
void host_task_forked(spank_t sp, struct host *h);                      /* task_post_fork */
void host_close(struct host *h);       /* slurmstepd: no more tasks will ask */
/* In the task: 1 the host started the copier, 0 no host (start it here), -1 unknown. */
int host_spawn(struct host *h, int fds[CF_N], const struct copier_spec *spec);

#endif
