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
/* slurmstepd (root), before the step's tasks: <spool>/<jobid> made if the Prolog has not yet;
 * the maker's life is bounded by budget_ms, slurmstepd's wait for it by wait_ms. */
void make_job_dir(const struct plugin_config *cfg, const struct task_id *id, long budget_ms,
                  long wait_ms);
/* slurmstepd (root), in task_exit: the exit record's one format (docs/CONTRACTS.md) from the
 * task's wait status and its copier's answer; returns its length, -1 if it did not fit. */
#define EXIT_RECORD_MAX 768
int exit_record_json(char *json, size_t cap, const struct task_id *id, int status, pid_t pid,
                     const struct handoff_report *dr);
/* slurmstepd (root): the record kept in the node-local dir (root's alone, tmpfs), where the
 * user cannot reach it; the node Epilog moves it into tasks/ when the spool lacks it. 0 or -1. */
int write_local_exit_record(const char *local_dir, const struct task_id *id, const char *json,
                            size_t n);
/* The copier (as the user), once task_exit sent it the record: tasks/<step>.<rank>.exit. */
void write_exit_record(int jfd, const struct task_id *id, const char *json, size_t n);

#endif
