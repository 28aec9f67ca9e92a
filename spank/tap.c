/*
 * The tap's task side: in the task (slurm_spank_task_init), as the user, just before exec.
 * It makes a pipe for stdout and one for stderr, keeps the original fds, opens a pidfd of
 * itself, binds the handoff socket (handoff.c), has ONE copier started (copier.c) by the host
 * (host.c) or, without one, by itself, then dup2s the pipes over fds 1 and 2. No spool I/O
 * here: a hung mount must never stall a task's start (spank/README.md, "The tap").
 */
#include "tap.h"
#include "copier.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}

/* The copier as a grandchild of the task (no host): the fallback path. 0 when it runs. */
static int fork_copier_here(int fds[CF_N], const struct copier_spec *spec,
                            const struct plugin_config *cfg)
{
    /* Every signal is blocked from before the first fork: a signal the job sends to its
     * process group at once (before the copier left it) must not kill the copier. The task
     * gets its mask back right after the fork; what arrived meanwhile is delivered then. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    /* Double fork: the copier is never a child of the user's program (no stray SIGCHLD,
     * nothing for a wait() loop in the program to reap); the middle process exits at once. */
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    if (pid == 0) {
        /* Out of the job's process group and session (the middle process leads a new one,
         * the copier is born in it): `kill 0`, `kill -- -PGID`, a shell forwarding a trapped
         * signal, proctrack/pgid's signals never reach it. */
        setsid();
        pid_t copier = fork();
        if (copier != 0)
            _exit(copier < 0 ? 1 : 0);
        copier_run(fds, -1, spec, cfg);
    }
    int wst = 0;
    pid_t r;
    while ((r = waitpid(pid, &wst, 0)) < 0 && errno == EINTR)
        ;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (r == pid && (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)) {
        errno = EAGAIN;
        return -1;
    }
    return 0;
}

int tap_start(spank_t sp, const struct task_id *id, const struct plugin_config *cfg,
              struct host *h, const struct handoff_names *dn)
{
    int fds[CF_N] = {-1, -1, -1, -1, -1, -1};
    int wr[2] = {-1, -1};          /* the pipes' write ends: the task's new stdout and stderr */
    const char *what;
    char stats[8] = "";
    int pout[2], perr[2];

    what = "make pipes";
    if (pipe2(pout, O_CLOEXEC) != 0)
        goto fail;
    fds[CF_OUT] = pout[0];
    wr[0] = pout[1];
    if (pipe2(perr, O_CLOEXEC) != 0)
        goto fail;
    fds[CF_ERR] = perr[0];
    wr[1] = perr[1];
    what = "dup stdout/stderr";
    if ((fds[CF_ORIG_OUT] = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3)) < 0 ||
        (fds[CF_ORIG_ERR] = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)) < 0)
        goto fail;
    /* Lets the copier see the task's end even if children keep the pipes open. */
    fds[CF_PIDFD] = (int)syscall(SYS_pidfd_open, getpid(), 0);
    /* Bound before the task can exit, so task_exit always finds it while the copier runs. */
    fds[CF_LSOCK] = handoff_listen(dn, id);
    if (spank_getenv(sp, "GPUALERT_TAP_STATS", stats, sizeof(stats)) != ESPANK_SUCCESS)
        stats[0] = '\0';

    struct copier_spec spec = {.id = *id, .task_pid = getpid(), .stats = stats[0] == '1'};
    /* The host (outside the step's cgroup) starts the copier when it can; else it is
     * started here, as before the host existed. */
    what = "start the copier";
    int hosted = host_spawn(h, fds, &spec);
    if (hosted < 0)
        goto fail;
    if (hosted == 0 && fork_copier_here(fds, &spec, cfg) != 0)
        goto fail;
    what = "redirect stdout/stderr";
    if (dup2(wr[0], STDOUT_FILENO) < 0 || dup2(wr[1], STDERR_FILENO) < 0) {
        /* The copier sees EOF and exits once our pipe ends are closed. */
        dup2(fds[CF_ORIG_OUT], STDOUT_FILENO);
        dup2(fds[CF_ORIG_ERR], STDERR_FILENO);
        goto fail;
    }
    close_fds(fds, CF_N);
    close_fds(wr, 2);
    return 0;

fail:
    slurm_info("gpualert: job %u %s.%u: tap: cannot %s: %s; task runs untapped", id->job,
               id->step_name, id->rank, what, strerror(errno));
    close_fds(fds, CF_N);
    close_fds(wr, 2);
    return 0;
}
