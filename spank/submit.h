/* The submit side (submit.c): sbatch and salloc (allocator context), srun (local context). */
#ifndef GPUALERT_SUBMIT_H
#define GPUALERT_SUBMIT_H

#include "gpualert.h"

#include <slurm/spank.h>

int submit_init(spank_t sp, int ac, char **av);
int submit_init_post_opt(spank_t sp, int ac, char **av);

#endif
