/*
 * gpualert SPANK plugin: what the files share. gpualert.c routes Slurm's callbacks,
 * options.c is the --gpualert grammar, copier.c the tap, records.c the spool writes that
 * root makes (exit records, tap.log) with the safe-open rules. See spank/README.md.
 */
#ifndef GPUALERT_H
#define GPUALERT_H

#define _GNU_SOURCE
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <slurm/spank.h>

#define OPTS_MAX 1024          /* longest OPTS accepted (it travels in the job's env) */

/* ---- plugin arguments (plugstack.conf), set in gpualert.c */
extern char spool[PATH_MAX];
extern int default_on;
extern size_t ring_bytes;      /* buffer= : spool bytes held while the spool is slow */
extern size_t batch_log_max;   /* batch_log_max= : head of the batch step's log kept (0: all) */
extern char local_dir[PATH_MAX]; /* local= : node-local dir for records the spool did not take */

/* ---- options.c */
extern struct spank_option gpualert_option;
int validate_opts(const char *opts, char *err, size_t errlen);
const char *gpualert_value(void);
int monitored(void);

/* ---- one task, as the SPANK items name it */
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
int get_task_id(spank_t sp, struct task_id *id);

/* ---- records.c: careful I/O in directories the job's user owns */
extern int in_copier;          /* set in the copier process: no slurm_* logging there */
int write_all(int fd, const void *buf, size_t n);
int open_subdir(int dirfd, const char *name);
int open_job_dir(const struct task_id *id);
int open_attempt_dir(int jfd, const struct task_id *id, int as_root);
int open_tasks_dir(int adir, const struct task_id *id, int as_root);
void tap_log(int jfd, const struct task_id *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void drain_socket_name(const struct task_id *id, struct sockaddr_un *sa, socklen_t *len);
void drain_nonces_make(uint32_t ntasks);   /* slurmstepd, before the tasks are forked */

/* What the copier tells task_exit once the task's output is drained. */
struct drain_report {
    int drained;               /* 1 all logged; 0 not (yet) at the bound; -1 no copier asked */
    unsigned long long bytes, gaps, gap_bytes, first_gap;
    int log_errno;             /* why the task log could not be written (0: it could) */
};
void write_exit_record(const struct task_id *id, int status, pid_t pid,
                       const struct drain_report *dr, long budget_ms);

/* ---- copier.c */
int start_tap(spank_t sp, const struct task_id *id);
/* The fds a copier works with (any may be -1 but the pipes and Slurm's two). */
enum { CF_OUT, CF_ERR, CF_ORIG_OUT, CF_ORIG_ERR, CF_PIDFD, CF_LSOCK, CF_N };
struct copier_spec {
    struct task_id id;
    pid_t task_pid;
    int stats;                 /* GPUALERT_TAP_STATS=1 */
    int hosted;                /* started by the host (outside the step's cgroup) */
};
__attribute__((noreturn)) void copier_run(int fds[CF_N], int ack, const struct copier_spec *spec);

/* ---- host.c: the copier host, outside the step's cgroup (spank/README.md) */
void host_start(spank_t sp);           /* slurmstepd, user_init */
void host_task_forked(spank_t sp);     /* slurmstepd, task_post_fork */
void host_close(void);                 /* slurmstepd: no more tasks will ask */
/* In the task: 1 the host started the copier, 0 no host (start it here), -1 unknown. */
int host_spawn(int fds[CF_N], const struct copier_spec *spec);

#endif
