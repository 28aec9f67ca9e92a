/*
 * gpualert SPANK plugin: routes each of Slurm's callbacks by context, and only that. The
 * submit side (sbatch, salloc, srun) is submit.c, slurmstepd and its tasks are stepd.c; the
 * map of the other files is in spank/README.md ("Files").
 */
#include "gpualert.h"
#include "config.h"
#include "stepd.h"
#include "submit.h"

#include <slurm/spank.h>

SPANK_PLUGIN(gpualert, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
        return submit_init(sp, ac, av);
    case S_CTX_REMOTE:
        return stepd_init(sp, ac, av);
    default:
        config_check(ac, av);  /* a bad plugstack.conf argument is said in every context */
        return 0;
    }
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
        return submit_init_post_opt(sp, ac, av);
    case S_CTX_REMOTE:
        return stepd_init_post_opt(sp, ac, av);
    default:
        return 0;
    }
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    return spank_context() == S_CTX_REMOTE ? stepd_user_init(sp, ac, av) : 0;
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
    return spank_context() == S_CTX_REMOTE ? stepd_task_post_fork(sp, ac, av) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    return spank_context() == S_CTX_REMOTE ? stepd_task_init(sp, ac, av) : 0;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    return spank_context() == S_CTX_REMOTE ? stepd_task_exit(sp, ac, av) : 0;
}
