/* The remote context (stepd.c): slurmstepd, and the tasks it forks, before they exec. */
#ifndef GPUALERT_STEPD_H
#define GPUALERT_STEPD_H

#include "gpualert.h"

#include <slurm/spank.h>

int stepd_init(spank_t sp, int ac, char **av);
int stepd_init_post_opt(spank_t sp, int ac, char **av);
int stepd_user_init(spank_t sp, int ac, char **av);
int stepd_task_post_fork(spank_t sp, int ac, char **av);
int stepd_task_init(spank_t sp, int ac, char **av);
int stepd_task_exit(spank_t sp, int ac, char **av);

#endif
