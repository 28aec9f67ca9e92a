/*
 * gpualert SPANK plugin: routes Slurm's callbacks. The option and SPANK_GPUALERT (allocator
 * and local contexts), the tap (task_init, in the task) and the exit records (task_exit, in
 * slurmstepd). See spank/README.md; the other files say what each part does.
 */
#include "gpualert.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

SPANK_PLUGIN(gpualert, 1);

#ifndef DRAIN_WAIT_MS
#define DRAIN_WAIT_MS 10000    /* task_exit waits at most this long per step, all tasks */
#endif
#define RECORD_WAIT_MS 2000    /* one exit record's write, before the spool counts as hung */

char spool[PATH_MAX];
int default_on;
size_t ring_bytes = 32u << 20;
size_t batch_log_max = 64u << 20;
char local_dir[PATH_MAX] = "/run/gpualert";

/* ------------------------------------------------------------------ plugin arguments */

/* N[KMG]; 0 is allowed (batch_log_max=0: keep all). Returns -1 when malformed. */
static long long parse_size(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    }
    return *end ? -1 : v;
}

static void parse_args(int ac, char **av)
{
    spool[0] = '\0';
    default_on = 0;
    for (int i = 0; i < ac; i++) {
        long long v;
        if (!strncmp(av[i], "spool=", 6)) {
            if (av[i][6] != '/' || strlen(av[i] + 6) >= sizeof(spool) - 64)
                slurm_error("gpualert: plugin argument %s: an absolute path is needed; "
                            "tapping disabled", av[i]);
            else
                snprintf(spool, sizeof(spool), "%s", av[i] + 6);
        } else if (!strcmp(av[i], "default=on")) {
            default_on = 1;
        } else if (!strcmp(av[i], "default=off")) {
            default_on = 0;
        } else if (!strncmp(av[i], "local=", 6)) {
            if (av[i][6] != '/' || strlen(av[i] + 6) >= sizeof(local_dir) - 64)
                slurm_error("gpualert: plugin argument %s: an absolute path is needed; keeping "
                            "%s", av[i], local_dir);
            else
                snprintf(local_dir, sizeof(local_dir), "%s", av[i] + 6);
        } else if (!strncmp(av[i], "buffer=", 7)) {
            v = parse_size(av[i] + 7);
            if (v < (64 << 10) || v > (1LL << 30))
                slurm_error("gpualert: plugin argument %s: a size from 64K to 1G is needed; "
                            "keeping %zu bytes", av[i], ring_bytes);
            else
                ring_bytes = (size_t)v;
        } else if (!strncmp(av[i], "batch_log_max=", 14)) {
            v = parse_size(av[i] + 14);
            if (v < 0 || (v > 0 && v < (1 << 20)))
                slurm_error("gpualert: plugin argument %s: 0 (no cap) or a size of at least "
                            "1M is needed; keeping %zu", av[i], batch_log_max);
            else
                batch_log_max = (size_t)v;
        } else {
            slurm_error("gpualert: unknown plugin argument '%s' (accepted: spool=/path, "
                        "default=on|off, local=/path, buffer=SIZE, batch_log_max=SIZE); ignored",
                        av[i]);
        }
    }
}

/* ------------------------------------------------------------------ allocator, local */

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    parse_args(ac, av);
    if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE)
        return 0;
    /* sbatch only sees options registered here, not a static spank_options table. */
    if (spank_option_register(sp, &gpualert_option) != ESPANK_SUCCESS)
        slurm_error("gpualert: cannot register --gpualert");
    return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL)
        return 0;
    if (spank_job_control_setenv(sp, "GPUALERT", gpualert_value(), 1) != ESPANK_SUCCESS)
        slurm_error("gpualert: cannot set SPANK_GPUALERT");
    return 0;
}

/* ------------------------------------------------------------------ remote (slurmstepd) */

/* Fills id; returns -1 for steps that are not tapped (extern, interactive) or on error. */
int get_task_id(spank_t sp, struct task_id *id)
{
    memset(id, 0, sizeof(*id));
    if (spank_get_item(sp, S_JOB_ID, &id->job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &id->step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_GLOBAL_ID, &id->rank) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &id->uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &id->gid) != ESPANK_SUCCESS)
        return -1;
    if (id->step == SLURM_EXTERN_CONT || id->step == SLURM_INTERACTIVE_STEP ||
        id->step == SLURM_PENDING_STEP)
        return -1;
    if (id->step == SLURM_BATCH_SCRIPT)
        snprintf(id->step_name, sizeof(id->step_name), "batch");
    else
        snprintf(id->step_name, sizeof(id->step_name), "%u", id->step);
    /* Several slurmd may share one host: the node name comes from the job, not uname. */
    if (spank_getenv(sp, "SLURMD_NODENAME", id->node, sizeof(id->node)) != ESPANK_SUCCESS)
        if (gethostname(id->node, sizeof(id->node)) != 0)
            snprintf(id->node, sizeof(id->node), "unknown");
    id->node[sizeof(id->node) - 1] = '\0';
    int local = -1;                /* only in the task hooks */
    if (spank_get_item(sp, S_TASK_ID, &local) == ESPANK_SUCCESS && local >= 0) {
        id->local = (uint32_t)local;
        id->has_local = 1;
    }
    /* A requeued job's tasks log into attempt-N/ (docs/CONTRACTS.md, Attempts). */
    char restarts[16];
    if (spank_getenv(sp, "SLURM_RESTART_COUNT", restarts, sizeof(restarts)) == ESPANK_SUCCESS)
        id->attempt = (unsigned)strtoul(restarts, NULL, 10);
    return 0;
}

/* Runs in slurmstepd with the job's euid, before any task is forked: the copier host. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_remote(sp) && monitored() && spool[0] != '\0') {
        uint32_t ntasks = 0;
        if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) == ESPANK_SUCCESS)
            drain_nonces_make(ntasks);
        host_start(sp);
    }
    return 0;
}

/* Runs in slurmstepd (root) after each task's fork. */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_remote(sp))
        host_task_forked(sp);
    return 0;
}

/* Runs in the task, as the user, just before exec. Never fails the task. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    struct task_id id;
    if (!spank_remote(sp) || !monitored() || spool[0] == '\0' || get_task_id(sp, &id) != 0)
        return 0;
    /* An interactive terminal stays a terminal. */
    if (isatty(STDOUT_FILENO))
        return 0;
    return start_tap(sp, &id);
}

static long ms_until(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

/* Asks the task's copier (bounded by deadline) whether its output is all logged. */
static void ask_copier(const struct task_id *id, const struct timespec *deadline,
                       struct drain_report *dr)
{
    struct sockaddr_un sa;
    socklen_t salen;
    drain_socket_name(id, &sa, &salen);
    /* Non-blocking: a connect to a listener whose backlog the job filled would otherwise
     * block slurmstepd (root) for as long as the job likes. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return;
    while (connect(fd, (struct sockaddr *)&sa, salen) != 0) {
        if (errno != EAGAIN || ms_until(deadline) <= 0)
            goto out;              /* no copier: never tapped, or already finished */
        struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
    }
    /* Anyone can bind an abstract name: only the job's user's copier is listened to. */
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != id->uid)
        goto out;
    char line[256];
    size_t got = 0;
    for (;;) {
        long left = ms_until(deadline);
        if (left <= 0) {
            slurm_info("gpualert: job %u %s.%u: the copier did not finish logging within "
                       "%d ms; not waiting longer", id->job, id->step_name, id->rank,
                       DRAIN_WAIT_MS);
            break;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = read(fd, line + got, sizeof(line) - 1 - got);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        line[got] = '\0';
        if (strchr(line, '\n') || got == sizeof(line) - 1) {
            int drained = 0;
            if (sscanf(line, "drained=%d bytes=%llu gaps=%llu gap_bytes=%llu first_gap=%llu "
                       "log_errno=%d", &drained, &dr->bytes, &dr->gaps, &dr->gap_bytes,
                       &dr->first_gap, &dr->log_errno) == 6)
                dr->drained = drained;
            break;
        }
    }
out:
    close(fd);
}

/* Runs in slurmstepd (root) when a task ended. Bounded per step; never blocks on the spool. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    static struct timespec deadline;
    struct task_id id;
    int status = 0;
    pid_t pid = 0;
    if (spank_remote(sp))
        host_close();
    if (!spank_remote(sp) || !monitored() || spool[0] == '\0' || get_task_id(sp, &id) != 0)
        return 0;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
        return 0;
    spank_get_item(sp, S_TASK_PID, &pid);
    /* One budget for the whole step (this slurmstepd): tasks ending one after another do
     * not each get DRAIN_WAIT_MS. */
    if (deadline.tv_sec == 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += DRAIN_WAIT_MS / 1000;
        deadline.tv_nsec += (DRAIN_WAIT_MS % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    struct drain_report dr = {.drained = -1};
    ask_copier(&id, &deadline, &dr);
    /* The copier cannot log to slurmd's log itself; a spool it could not write is no
     * silent fault, so it is said here. */
    if (dr.log_errno)
        slurm_info("gpualert: job %u %s.%u: output forwarded but not logged: %s", id.job,
                   id.step_name, id.rank, strerror(dr.log_errno));
    write_exit_record(&id, status, pid, &dr, RECORD_WAIT_MS);
    return 0;
}
