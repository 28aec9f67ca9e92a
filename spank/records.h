/* Careful I/O in directories the job's user owns, and the records written there (records.c). */
#ifndef GPUALERT_RECORDS_H
#define GPUALERT_RECORDS_H

#include "gpualert.h"
#include "config.h"

#include <time.h>

int write_all(int fd, const void *buf, size_t n);
int open_subdir(int dirfd, const char *name);
int open_job_dir(const char *spool, const struct task_id *id);
int open_attempt_dir(int jfd, const struct task_id *id, int as_root);
int open_tasks_dir(int adir, const struct task_id *id, int as_root);
/* quiet: never fall back to slurm_info (the copier, which closed slurmd's log fd). */
void tap_log(int jfd, const struct task_id *id, int quiet, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The copier, as the user, once the task's log is open in tasks/ (TDIR). */
void write_start_record(int tdir, const struct task_id *id, pid_t task_pid, time_t start_time);
/* slurmstepd (root), in task_exit; bounded by budget_ms, nothing more once *spool_hung. */
void write_exit_record(const struct plugin_config *cfg, const struct task_id *id, int status,
                       pid_t pid, const struct drain_report *dr, long budget_ms,
                       int *spool_hung);

#endif
