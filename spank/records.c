/*
 * The records (tap.log, start records, exit records) and the writes into the job's spool
 * directory that make them. The directory belongs to the job's user, who can replace
 * anything in it while we work: every open here is relative to a directory fd, never follows
 * a link (O_NOFOLLOW), never blocks (O_NONBLOCK: a FIFO fails instead of waiting for a
 * reader), and what it opened is checked with fstat before a byte is written.
 */
#include "records.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)

int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                /* The destination may be non-blocking: wait until it takes more. */
                struct pollfd pfd = {fd, POLLOUT, 0};
                if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                    return -1;
                continue;
            }
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int open_subdir(int dirfd, const char *name)
{
    return openat(dirfd, name, DIR_FLAGS);
}

/* <spool>/<jobid>; -1 if absent or not a real directory. */
int open_job_dir(const char *spool, const struct task_id *id)
{
    int sfd = open(spool, DIR_FLAGS);
    if (sfd < 0)
        return -1;
    char name[16];
    snprintf(name, sizeof(name), "%u", id->job);
    int jfd = open_subdir(sfd, name);
    int saved = errno;
    close(sfd);
    errno = saved;
    return jfd;
}

/* Opens (making it if missing) a subdirectory of a user-owned dir. As root, a directory we
 * make is given to the user, and one we find must already be theirs. */
static int ensure_user_dir(int dirfd, const char *name, const struct task_id *id, int as_root)
{
    int made = mkdirat(dirfd, name, 0700) == 0;
    if (!made && errno != EEXIST)
        return -1;
    int fd = open_subdir(dirfd, name);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0)
        goto refuse;
    if (as_root) {
        if (made && st.st_uid == 0 && fchown(fd, id->uid, id->gid) == 0)
            return fd;
        if (st.st_uid != id->uid) {
            errno = EPERM;
            goto refuse;
        }
    }
    return fd;
refuse:;
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

/* The attempt's directory (docs/CONTRACTS.md, Attempts): the job dir itself for attempt 0,
 * attempt-N/ after N requeues. Returns a new fd. It must be what every reader accepts
 * (core/spool.py open_attempt): a directory of the job's user, mode 0700; a dir the Prolog
 * and the epilogs refuse is not written to either (EPERM). */
int open_attempt_dir(int jfd, const struct task_id *id, int as_root)
{
    int fd;
    if (id->attempt == 0) {
        fd = fcntl(jfd, F_DUPFD_CLOEXEC, 3);
    } else {
        char name[32];
        snprintf(name, sizeof(name), "attempt-%u", id->attempt);
        fd = ensure_user_dir(jfd, name, id, as_root);
    }
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != id->uid ||
                    (st.st_mode & 077))) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

int open_tasks_dir(int adir, const struct task_id *id, int as_root)
{
    return ensure_user_dir(adir, "tasks", id, as_root);
}

static void iso_now(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One line to <job dir>/tap.log; slurm_info (slurmd's log) when that cannot be done and not
 * quiet. Only a plain file with one link that belongs to the job's user (or that root made
 * in this call, O_EXCL) is used. */
void tap_log(int jfd, const struct task_id *id, int quiet, const char *fmt, ...)
{
    char msg[512], line[800], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    iso_now(ts, sizeof(ts));
    int n = snprintf(line, sizeof(line), "%s %s %s.%u attempt=%u %s\n", ts, id->node,
                     id->step_name, id->rank, id->attempt, msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = sizeof(line) - 1;
    int fd = -1;
    if (jfd >= 0) {
        /* Root gives the user only the file it made here and now: a root-owned tap.log found
         * in place was moved there by the user (job.json, a verdict), and is not theirs. */
        int made = 0;
        fd = openat(jfd, "tap.log", O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW |
                    O_NONBLOCK | O_CLOEXEC, 0600);
        if (fd >= 0)
            made = 1;
        else if (errno == EEXIST)
            fd = openat(jfd, "tap.log", O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        uid_t me = geteuid();
        if (fd >= 0 &&
            (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
             (st.st_uid != id->uid &&
              !(made && me == 0 && st.st_uid == 0 && fchown(fd, id->uid, id->gid) == 0)))) {
            close(fd);
            fd = -1;
        }
    }
    /* Quiet in the copier: it closed slurm's log fd, whose number may now be another file. */
    if ((fd < 0 || write_all(fd, line, (size_t)n) != 0) && !quiet)
        slurm_info("gpualert: job %u %.*s", id->job, n - 1, line);
    if (fd >= 0)
        close(fd);
}

/*
 * A record file in tasks/ (the copier, as the user): created at its name with O_EXCL, the one
 * write, closed. Only when the name is taken (planted by the job: a link, FIFO or directory;
 * or put there by the node Epilog) does it go through a fresh temp file renamed over it, which
 * replaces a link or file and is refused by a directory, never written through. Why not
 * always the temp file: a rename into a tasks/ dir of a few thousand entries cost 60% of the
 * copier's writer CPU (bench_tap, issue 20). Not fsynced, like the log itself: the node-local
 * copy (exit records) and the Epilog stand in for it. Returns 0 or an errno.
 */
static int put_record(int tdir, const char *final, const char *json, size_t n)
{
    int fd = openat(tdir, final, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
        int rc = write_all(fd, json, n) == 0 ? 0 : errno;
        close(fd);
        if (rc)
            unlinkat(tdir, final, 0);
        return rc;
    }
    if (errno != EEXIST)
        return errno;
    char tmp[96];
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", final, (int)getpid());
    fd = openat(tdir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int rc = write_all(fd, json, n) == 0 ? 0 : errno;
    close(fd);
    if (!rc && renameat(tdir, tmp, tdir, final) != 0)
        rc = errno;
    if (rc)
        unlinkat(tdir, tmp, 0);
    return rc;
}

/* <step>.<rank>.start: which node ran the rank. A node that is lost leaves no exit record,
 * and this is then what ties its ranks to it. Best effort, as the user (put_record). */
void write_start_record(int tdir, const struct task_id *id, pid_t task_pid, time_t start_time)
{
    char json[256], final[64];
    int n = snprintf(json, sizeof(json), "{\"node\": \"%s\", \"step\": \"%s\", \"rank\": %u, "
                     "\"pid\": %d, \"start_time\": %ld, \"attempt\": %u}\n", id->node,
                     id->step_name, id->rank, (int)task_pid, (long)start_time, id->attempt);
    snprintf(final, sizeof(final), "%s.%u.start", id->step_name, id->rank);
    if (n > 0 && (size_t)n < sizeof(json))
        put_record(tdir, final, json, (size_t)n);
}

/* mkdirat, then 0700 and the user's, through an fd (in a dir we just made nobody else can
 * swap the name, but the mode must not depend on slurmstepd's umask). Returns 0 or -1. */
static int make_user_subdir(int dirfd, const char *name, const struct task_id *id)
{
    if (mkdirat(dirfd, name, 0700) != 0)
        return -1;
    int fd = open_subdir(dirfd, name);
    if (fd < 0)
        return -1;
    int rc = fchown(fd, id->uid, id->gid) == 0 && fchmod(fd, 0700) == 0 ? 0 : -1;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* The temp dir of job_dir_child, and what it holds, gone again (it never was the job's). */
static void remove_tmp_dir(int sfd, const char *tmp, int attempt_sub, const char *asub)
{
    int tfd = open_subdir(sfd, tmp);
    if (tfd >= 0) {
        int afd = attempt_sub ? open_subdir(tfd, asub) : fcntl(tfd, F_DUPFD_CLOEXEC, 3);
        if (afd >= 0) {
            unlinkat(afd, "nodes", AT_REMOVEDIR);
            unlinkat(afd, "tasks", AT_REMOVEDIR);
            close(afd);
        }
        if (attempt_sub)
            unlinkat(tfd, asub, AT_REMOVEDIR);
        close(tfd);
    }
    unlinkat(sfd, tmp, AT_REMOVEDIR);
}

/*
 * In a child of slurmstepd (root), before any task: <spool>/<jobid> for the job's user, 0700,
 * with the attempt's nodes/ and tasks/, exactly as the Prolog makes it (core/spool.py,
 * create_job_dir): built under a temp name, then renamed into place without replacing
 * anything, so that a Prolog or another node racing for it sees it whole or not at all. The
 * Prolog that comes later joins it and writes job.json. Why here: a job must not wait for its
 * Prolog (a burst of 500 starts held slurmctld's batch launches behind them), yet its first
 * byte of output must have a log to go to. Nothing is done when the dir is there (the Prolog
 * ran). Returns 0 or an errno.
 */
static int job_dir_child(const char *spool, const struct task_id *id)
{
    int sfd = open(spool, DIR_FLAGS), rc = 0;
    struct stat st;
    if (sfd < 0)
        return errno;
    /* The spool must be root's and writable by nobody else (check_spool_root). */
    if (fstat(sfd, &st) != 0 || st.st_uid != 0 || (st.st_mode & 022)) {
        close(sfd);
        return EPERM;
    }
    char name[16], tmp[96], asub[32];
    snprintf(name, sizeof(name), "%u", id->job);
    if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
        close(sfd);
        return 0;                  /* there (the readers check what it is), or not ours to say */
    }
    snprintf(asub, sizeof(asub), "attempt-%u", id->attempt);
    /* Unique across the nodes sharing the spool: the node's name (as _safe_tag keeps it) and
     * this child's pid; the gc removes a .tmp-* a killed child left. */
    char tag[41];
    size_t k = 0;
    for (const char *c = id->node; *c && k < sizeof(tag) - 1; c++)
        tag[k++] = (isalnum((unsigned char)*c) || *c == '-' || *c == '_') ? *c : '_';
    tag[k] = '\0';
    snprintf(tmp, sizeof(tmp), ".tmp-%u-%s-%d", id->job, k ? tag : "x", (int)getpid());
    if (mkdirat(sfd, tmp, 0700) != 0) {
        rc = errno;
        close(sfd);
        return rc;
    }
    int tfd = open_subdir(sfd, tmp), afd = -1;
    if (tfd < 0)
        goto fail;
    if (id->attempt && make_user_subdir(tfd, asub, id) != 0)
        goto fail;
    afd = id->attempt ? open_subdir(tfd, asub) : fcntl(tfd, F_DUPFD_CLOEXEC, 3);
    if (afd < 0 || make_user_subdir(afd, "nodes", id) != 0 ||
        make_user_subdir(afd, "tasks", id) != 0)
        goto fail;
    if (fchown(tfd, id->uid, id->gid) != 0 || fchmod(tfd, 0700) != 0 || fsync(tfd) != 0)
        goto fail;
    if (syscall(SYS_renameat2, sfd, tmp, sfd, name, RENAME_NOREPLACE) != 0) {
        /* NFS and older kernels lack the flag: a plain rename still never replaces the
         * non-empty dir another node made, and only root can make one here. */
        if ((errno != EINVAL && errno != ENOSYS) || renameat(sfd, tmp, sfd, name) != 0) {
            rc = errno == EEXIST || errno == ENOTEMPTY ? 0 : errno;  /* another was quicker */
            goto out;
        }
    }
    close(afd);
    close(tfd);
    fsync(sfd);                    /* the name on disk before a task can crash */
    close(sfd);
    return 0;
fail:
    rc = errno ? errno : EIO;
out:
    if (afd >= 0)
        close(afd);
    if (tfd >= 0)
        close(tfd);
    remove_tmp_dir(sfd, tmp, id->attempt != 0, asub);
    close(sfd);
    return rc;
}

/* In a child of slurmstepd that may wait on a hung spool: SIGALRM (default action, unblocked)
 * after secs ends it, as SIGKILL would end a wait in a hung mount. */
static void end_itself_after(unsigned secs)
{
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    signal(SIGALRM, SIG_DFL);
    sigprocmask(SIG_UNBLOCK, &alrm, NULL);
    alarm(secs);
}

/* The copier (as the user), once task_exit has sent it the record: tasks/<step>.<rank>.exit
 * in the job dir jfd (put_record: a planted link, FIFO or directory is replaced or refused,
 * never written through). Root writes nothing here: the record root keeps is the node-local
 * one (write_local_exit_record). */
void write_exit_record(int jfd, const struct task_id *id, const char *json, size_t n)
{
    int adir = open_attempt_dir(jfd, id, 0), tfd = -1, rc = 0;
    if (adir < 0 || (tfd = open_tasks_dir(adir, id, 0)) < 0) {
        rc = errno;
        tap_log(jfd, id, 1, "exit record: no usable tasks/ dir: %s", strerror(rc));
        goto out;
    }
    char final[64];
    snprintf(final, sizeof(final), "%s.%u.exit", id->step_name, id->rank);
    if ((rc = put_record(tfd, final, json, n)) != 0)
        tap_log(jfd, id, 1, "exit record: cannot write: %s", strerror(rc));
out:
    if (tfd >= 0)
        close(tfd);
    if (adir >= 0)
        close(adir);
}

/* Root's own copy, in the node-local dir (root's, on tmpfs: it never hangs, and the user cannot
 * reach it): the spool's copy is the copier's, as the user, and may never come (no copier, a
 * hung spool); the node Epilog moves this one in then. Returns 0 or -1. */
int write_local_exit_record(const char *local_dir, const struct task_id *id, const char *json,
                            size_t n)
{
    if (mkdir(local_dir, 0700) != 0 && errno != EEXIST)
        return -1;
    int dfd = open(local_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (dfd < 0)
        return -1;
    if (fstat(dfd, &st) != 0 || st.st_uid != 0 || (st.st_mode & 022)) {
        close(dfd);                /* only a dir nobody but root can write */
        return -1;
    }
    char name[128], tmp[160];
    snprintf(name, sizeof(name), "%u.%u.%s.%u.exit", id->job, id->attempt, id->step_name,
             id->rank);
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write_all(fd, json, n) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok || renameat(dfd, tmp, dfd, name) != 0) {
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return -1;
    }
    close(dfd);
    return 0;
}

/* The record's one format (docs/CONTRACTS.md), made by slurmstepd from the task's wait status
 * and what its copier said of the log. Returns its length, or -1 if it did not fit. */
int exit_record_json(char *json, size_t cap, const struct task_id *id, int status, pid_t pid,
                     const struct handoff_report *dr)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char exit_code[16] = "null", sig[16] = "null", logf[256];
    if (WIFEXITED(status))
        snprintf(exit_code, sizeof(exit_code), "%d", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        snprintf(sig, sizeof(sig), "%d", WTERMSIG(status));
    /* What the copier said of the log; null where no copier was there to ask (untapped,
     * or it had already finished and gone). */
    if (dr->flushed < 0)
        snprintf(logf, sizeof(logf), "\"log_flushed\": null, \"log_bytes\": null, "
                 "\"log_gaps\": null, \"log_gap_bytes\": null, \"log_first_gap\": null");
    else
        snprintf(logf, sizeof(logf), "\"log_flushed\": %s, \"log_bytes\": %llu, "
                 "\"log_gaps\": %llu, \"log_gap_bytes\": %llu, \"log_first_gap\": %lld",
                 dr->flushed ? "true" : "false", dr->bytes, dr->gaps, dr->gap_bytes,
                 dr->gaps ? (long long)dr->first_gap : -1LL);
    int n = snprintf(json, cap,
                     "{\"node\": \"%s\", \"step\": \"%s\", \"rank\": %u, \"pid\": %d, "
                     "\"exit_code\": %s, \"signal\": %s, \"core_dumped\": %s, "
                     "\"end_time\": %ld.%03ld, \"status\": %d, \"attempt\": %u, %s}\n",
                     id->node, id->step_name, id->rank, (int)pid, exit_code, sig,
                     (WIFSIGNALED(status) && WCOREDUMP(status)) ? "true" : "false",
                     (long)ts.tv_sec, ts.tv_nsec / 1000000, status, id->attempt, logf);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

/*
 * slurmstepd (root), once per step before any task: the job's spool dir, made by a child
 * (job_dir_child) that ends itself when budget_ms runs out. slurmstepd waits for it at most
 * wait_ms: a spool that hangs or a disk slow to fsync never holds the step longer; the child
 * then goes on by itself and the copier waits for the dir (copier.c). Whatever happens, the
 * step goes on: without the dir its output is forwarded and not logged, as before.
 */
void make_job_dir(const struct plugin_config *cfg, const struct task_id *id, long budget_ms,
                  long wait_ms)
{
    int res[2];
    if (pipe2(res, O_CLOEXEC) != 0)
        return;
    pid_t child = fork();
    if (child < 0) {
        slurm_info("gpualert: job %u: no spool dir made: fork: %s", id->job, strerror(errno));
        close(res[0]);
        close(res[1]);
        return;
    }
    if (child == 0) {
        end_itself_after((unsigned)((budget_ms + 999) / 1000));
        close(res[0]);
        unsigned char rc = (unsigned char)(job_dir_child(cfg->spool, id) & 0xff);
        if (write(res[1], &rc, 1) != 1) {
            /* slurmstepd went on without us */
        }
        _exit(0);
    }
    close(res[1]);
    struct pollfd p = {res[0], POLLIN, 0};
    long end = mono_ms() + wait_ms;
    int r;
    do {
        long left = end - mono_ms();
        r = poll(&p, 1, left > 0 ? (int)left : 0);
    } while (r < 0 && errno == EINTR);
    unsigned char rc = 0;
    if (r == 1 && read(res[0], &rc, 1) == 1 && rc)
        slurm_info("gpualert: job %u: spool dir %s/%u not made: %s; output is forwarded but "
                   "not logged (see `gpualert doctor`)", id->job, cfg->spool, id->job,
                   strerror(rc));
    close(res[0]);
    /* No task exists yet, so slurmstepd's own wait cannot have reaped it; one still at work
     * is left to end by itself (its alarm), and slurmstepd's wait for children reaps it. */
    if (r == 1)
        waitpid(child, NULL, 0);
}
