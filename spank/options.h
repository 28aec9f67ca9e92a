/* The user's --gpualert[=OPTS] option (options.c). */
#ifndef GPUALERT_OPTIONS_H
#define GPUALERT_OPTIONS_H

#include "gpualert.h"

#include <slurm/spank.h>

/* Registers --gpualert (sbatch only sees options registered in init, not a static table). */
void options_register(spank_t sp);
/* 0 when OPTS is valid, else -1 with the error written to err. */
int validate_opts(const char *opts, char *err, size_t errlen);
/* What SPANK_GPUALERT carries: off, on, or the validated options. */
const char *gpualert_value(int default_on);
/* Whether this job (or step) is watched: the option, else default=. */
int monitored(int default_on);

#endif
