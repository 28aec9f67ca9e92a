/*
 * gpualert SPANK plugin: the types the files share (one task's identity, the copier's fds and
 * spec, the copier's handoff answer). Each .c has its own header for its functions; the map of
 * the files is in spank/README.md ("Files").
 */
#ifndef GPUALERT_H
#define GPUALERT_H

#define _GNU_SOURCE
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OPTS_MAX 1024          /* longest OPTS accepted (it travels in the job's env) */

/* One task, as the SPANK items name it (stepd.c fills it). */
struct task_id {
    uint32_t job, step, rank;
    unsigned attempt;          /* SLURM_RESTART_COUNT: 0 first run, N after N requeues */
    uid_t uid;
    gid_t gid;
    char step_name[16];
    char node[64];
    uint32_t local;            /* S_TASK_ID: the task's index on this node */
    int has_local;
};

/* The fds a copier works with (any may be -1 but the pipes and Slurm's two). */
enum { CF_OUT, CF_ERR, CF_ORIG_OUT, CF_ORIG_ERR, CF_PIDFD, CF_LSOCK, CF_N };

/* What a copier is told of its task (by tap.c, directly or through the host). */
struct copier_spec {
    struct task_id id;
    pid_t task_pid;
    int stats;                 /* GPUALERT_TAP_STATS=1 */
    int hosted;                /* started by the host (outside the step's cgroup) */
};

/* What the copier tells task_exit once the task's output is written out (handoff.c). */
struct handoff_report {
    int flushed;               /* 1 all logged; 0 not (yet) at the bound; -1 no copier asked */
    unsigned long long bytes, gaps, gap_bytes, first_gap;
    int log_errno;             /* why the task log could not be written (0: it could) */
};

#endif
