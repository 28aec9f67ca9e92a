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
/* Exit records being written, each by a child of slurmstepd (the step's, in stepd.c). */
#define EXIT_WRITES_MAX 16
struct exit_write {
    pid_t pid;
    int pidfd, rfd;            /* the child; the pipe it says its result on */
    long deadline_ms, budget_ms;
    uint32_t job, rank;        /* for what is said of it */
    char step_name[16];
    char local[PATH_MAX + 160]; /* its node-local copy, let go once the spool has it */
};
struct exit_writes {
    struct exit_write w[EXIT_WRITES_MAX];
    int n;
    int hung;                  /* one timed out: the step writes no more to the spool */
};
/* slurmstepd (root), in task_exit: each record bounded by budget_ms; the last one of the
 * step (last) waits for all that are still being written. */
void write_exit_record(const struct plugin_config *cfg, const struct task_id *id, int status,
                       pid_t pid, const struct drain_report *dr, long budget_ms,
                       struct exit_writes *ws, int last);
/* Until at most keep records are in flight (each within its budget). */
void exit_records_wait(struct exit_writes *ws, const struct plugin_config *cfg, int keep);

#endif
