/* The copier (copier.c): one process per task that forwards and logs its output. */
#ifndef GPUALERT_COPIER_H
#define GPUALERT_COPIER_H

#include "gpualert.h"
#include "config.h"

/* Runs in the new copier process (no host: the task's grandchild): keeps only its fds, says
 * "1" on ack (>= 0) once it runs, copies until the task's output ends. */
__attribute__((noreturn)) void copier_run(int fds[CF_N], int ack, const struct copier_spec *spec,
                                          const struct plugin_config *cfg);

/* In the host: the task's copier as two threads of the host's (forwarder, writer), no fork.
 * 0 once started (the threads own fds; "1" was said on ack); -1 and nothing taken. */
int copier_start_thread(int fds[CF_N], int ack, const struct copier_spec *spec,
                        const struct plugin_config *cfg);

/* In the host, once no task will come: returns when its last copier has finished. */
void copier_wait_all(void);

#endif
