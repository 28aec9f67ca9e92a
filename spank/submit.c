/*
 * The submit side: sbatch and salloc (allocator context) and srun (local context). The
 * option is registered (and validated at submit time, options.c), and SPANK_GPUALERT is set
 * for the Prolog, the Epilog and EpilogSlurmctld.
 */
#include "submit.h"
#include "config.h"
#include "options.h"

/* SPANK hands a callback no pointer of ours: the arguments parsed in init live here. */
static struct plugin_config config;

int submit_init(spank_t sp, int ac, char **av)
{
    config_parse(&config, ac, av);
    options_register(sp);
    return 0;
}

int submit_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_job_control_setenv(sp, "GPUALERT", gpualert_value(config.default_on), 1) !=
        ESPANK_SUCCESS)
        slurm_error("gpualert: cannot set SPANK_GPUALERT");
    return 0;
}
