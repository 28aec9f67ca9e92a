/* The copier (copier.c): one process per task that forwards and logs its output. */
#ifndef GPUALERT_COPIER_H
#define GPUALERT_COPIER_H

#include "gpualert.h"
#include "config.h"

/* Runs in the new copier process (a child of the host, or the task's grandchild): keeps only
 * its fds, says "1" on ack (>= 0) once it runs, copies until the task's output ends. */
__attribute__((noreturn)) void copier_run(int fds[CF_N], int ack, const struct copier_spec *spec,
                                          const struct plugin_config *cfg);

#endif
