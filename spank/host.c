/*
 * The copier host: one small process per step, forked by slurmstepd in user_init, that
 * runs each task's copier. Why: a process forked by the task (in task_init) lives in the
 * step's cgroup, and a copier stuck in a write to a stalled FUSE or Lustre spool then holds
 * the step's end until the spool answers (past UnkillableStepTimeout Slurm drains the node).
 * slurmstepd is not in the step's cgroup (proctrack/cgroup keeps it one level up, at the
 * job's), so neither is the host nor its copiers: the step ends when its tasks end, and a
 * copier waiting on the spool finishes its log once the spool is back.
 *
 * The host runs as the job's user (its privileges are dropped for good before it does
 * anything), in a session of its own with every signal blocked, and holds nothing of
 * slurmstepd's but one end of a socketpair. Each task (in task_init, our code before exec)
 * sends its pipe ends, Slurm's original stdout/stderr, its pidfd and handoff socket over the
 * pair (SCM_RIGHTS) with a fresh ack pipe; the host starts the task's copier as two threads
 * of its own (copier_start_thread: no fork per task; the forwarder starts the writer) and
 * says "1" on the ack pipe once the forwarder exists. No answer (host gone, threads not started): the task forks the copier itself, as
 * before the host existed. The host stops taking tasks when slurmstepd and every task have
 * closed their end, i.e. once the step's last task has exec'd, and ends with its last copier.
 */
#include "host.h"
#include "cgroup.h"
#include "copier.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/slurm.h>

#define HOST_ACK_MS 5000           /* how long a task waits for its copier to say it runs */
#define HOST_MOVE_MS 2000          /* how long slurmstepd waits for the host's move (v2) */

struct host_msg {
    struct copier_spec spec;
    unsigned have;                 /* bit i: fds[i] is among the fds sent, in order */
};

/* Closes every fd but keep (the host must hold nothing of slurmstepd's). */
static void close_all_except(int keep)
{
    if (keep > 0)
        close_range(0, (unsigned int)keep - 1, 0);
    close_range((unsigned int)keep + 1, ~0U, 0);
}

/* For good: the host must be no more than the job's user (real, effective, saved ids). */
static int become_user(uid_t uid, gid_t gid, const gid_t *groups, int ngroups)
{
    if (getuid() == 0 && geteuid() != 0 && seteuid(0) != 0)
        return -1;
    if (geteuid() == 0 && setgroups((size_t)ngroups, groups) != 0)
        return -1;
    if (setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
        return -1;
    return getuid() == uid && geteuid() == uid && getegid() == gid ? 0 : -1;
}

/* One message and its fds; returns the payload's size, 0 at EOF, -1 on error. */
static ssize_t recv_task(int sock, struct host_msg *m, int *fds, int *nfds)
{
    char cbuf[CMSG_SPACE(sizeof(int) * (CF_N + 1))];
    struct iovec iov = {m, sizeof(*m)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    *nfds = 0;
    if (r <= 0)
        return r;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < n && *nfds < CF_N + 1; i++)
            memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if (mh.msg_flags & MSG_CTRUNC)
        return -2;
    return r;
}

static __attribute__((noreturn)) void host_main(int sock, const struct plugin_config *cfg)
{
    for (;;) {
        struct host_msg m;
        int got[CF_N + 1], ngot;
        ssize_t r = recv_task(sock, &m, got, &ngot);
        if (r == 0 || (r == -1 && errno != EINTR)) {
            /* No task will come any more: the host lives on until its last copier is done
             * (its main thread too: /proc/<pid>/fd goes blank once a leader thread exits). */
            close(sock);
            copier_wait_all();
            _exit(0);
        }
        int fds[CF_N], k = 0, ok = r == (ssize_t)sizeof(m);
        for (int i = 0; i < CF_N; i++)
            fds[i] = ok && (m.have & (1u << i)) && k < ngot ? got[k++] : -1;
        int ack = ok && k < ngot ? got[k++] : -1;
        ok = ok && k == ngot && ack >= 0 && fds[CF_OUT] >= 0 && fds[CF_ERR] >= 0 &&
             fds[CF_ORIG_OUT] >= 0 && fds[CF_ORIG_ERR] >= 0;
        /* Threads, not a fork per task: a fork of this process (slurmstepd's image, ~180
         * mappings) and its exit cost more than the rest of the tap (issue 20). The copier's
         * threads own the fds from here on. */
        m.spec.hosted = 1;
        if (ok && copier_start_thread(fds, ack, &m.spec, cfg) == 0)
            continue;
        /* Closing the ack end here is what tells the task "no copier" (EOF): it starts one. */
        for (int i = 0; i < ngot; i++)
            close(got[i]);
    }
}

/*
 * Where the host goes (cgroup.c decides): where slurmstepd is, under v1 (proctrack/cgroup
 * keeps slurmstepd in the job's freezer cgroup, outside the step's); under v2, where
 * slurmstepd sits in job_X/step_Y/slurm, which Slurm counts with the step's tasks
 * at its end, in a cgroup of gpualert's own beside Slurm's scope, which the step's end,
 * cgroup.kill and freeze do not reach (the host moves itself there as root, before it drops
 * to the user). A layout the plugin does not know: no host, each task starts its copier (the
 * safe path: the job runs as without gpualert while the spool answers), said once a node
 * (the marker is the init_post_opt side's, cgroup_layout_check). PATH gets gpualert's
 * cgroup's path under /sys/fs/cgroup.
 */
static enum gpa_copier_place host_place(char *path, size_t len)
{
    enum gpa_cgroup_mode mode = gpa_cgroup_mode(GPA_CGROUP_ROOT);
    char own[PATH_MAX];
    enum gpa_copier_place place = gpa_copier_place("/proc/self/cgroup", mode, own, sizeof(own));
    if (place == GPA_PLACE_OWN_CGROUP &&
        snprintf(path, len, "%s%s", GPA_CGROUP_ROOT, own) >= (int)len)
        place = GPA_PLACE_UNKNOWN;
    if (place == GPA_PLACE_TASK && mode == GPA_CG_V2)
        slurm_info("gpualert: cgroup v2: slurmstepd is in the step's cgroup; copiers start in "
                   "the tasks (a copier stalled on the spool holds the step's end)");
    if (place == GPA_PLACE_UNKNOWN && mode != GPA_CG_MIXED)
        /* (mixed was said once a node at init_post_opt; this is slurmstepd's own place) */
        slurm_info("gpualert: unknown cgroup layout (%s, slurmstepd not where Slurm puts it); "
                   "copiers start in the tasks", gpa_cgroup_mode_name(mode));
    return place;
}

/* In the host, still root-capable (real uid 0): into gpualert's own cgroup (mkdir if need
 * be). A fork of multithreaded slurmstepd: system calls only. Returns 0 or an errno. */
static int move_to_own_cgroup(const char *path)
{
    char procs[PATH_MAX + 16];
    if (getuid() == 0 && geteuid() != 0 && seteuid(0) != 0)
        return errno;
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return errno;
    if ((size_t)snprintf(procs, sizeof(procs), "%s/cgroup.procs", path) >= sizeof(procs))
        return ENAMETOOLONG;
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = write(fd, "0", 1) == 1 ? 0 : errno;
    close(fd);
    return err;
}

/* slurmstepd: the host's word on its move (one int, an errno; 0 moved), bounded. */
static int host_moved(int sock)
{
    struct pollfd p = {sock, POLLIN, 0};
    int err = ETIMEDOUT, pr;
    while ((pr = poll(&p, 1, HOST_MOVE_MS)) < 0 && errno == EINTR)
        ;
    if (pr > 0 && recv(sock, &err, sizeof(err), 0) != (ssize_t)sizeof(err))
        err = EPIPE;
    return err;
}

/* slurmstepd (root), init_post_opt: a mixed cgroup layout is said once a node (a marker in the
 * node-local root dir), not once a step; user_init then finds it again and starts no host. */
void host_layout_check(const struct plugin_config *cfg)
{
    enum gpa_cgroup_mode mode = gpa_cgroup_mode(GPA_CGROUP_ROOT);
    if (mode != GPA_CG_MIXED)
        return;
    if (mkdir(cfg->local_dir, 0700) != 0 && errno != EEXIST)
        return;
    int dfd = open(cfg->local_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    int fd = openat(dfd, "cgroup-layout.logged", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                    O_CLOEXEC, 0600);
    close(dfd);
    if (fd < 0)
        return;
    close(fd);
    slurm_info("gpualert: unknown cgroup layout (mixed: a cgroup v1 hierarchy inside the "
               "cgroup2 root %s); copiers start in the tasks (said once on this node)",
               GPA_CGROUP_ROOT);
}

/* slurmstepd, user_init (euid is the job's user): forks the host for this step. */
void host_start(spank_t sp, struct host *h, const struct plugin_config *cfg)
{
    uint32_t step;
    uid_t uid;
    gid_t gid;
    if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)
        return;
    if (step == SLURM_EXTERN_CONT || step == SLURM_INTERACTIVE_STEP ||
        step == SLURM_PENDING_STEP)
        return;
    char own[PATH_MAX] = "";
    enum gpa_copier_place place = host_place(own, sizeof(own));
    if (place == GPA_PLACE_TASK || place == GPA_PLACE_UNKNOWN)
        return;
    /* The job's groups, as slurmstepd set them for user_init. */
    int ngroups = getgroups(0, NULL);
    gid_t *groups = ngroups > 0 ? calloc((size_t)ngroups, sizeof(gid_t)) : NULL;
    if (ngroups < 0 || (ngroups > 0 && (!groups || getgroups(ngroups, groups) != ngroups))) {
        free(groups);
        return;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        slurm_info("gpualert: no copier host (socketpair: %s); copiers start in the tasks",
                   strerror(errno));
        free(groups);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* A fork of multithreaded slurmstepd: no slurm_* call (its log lock may be held),
         * and first of all drop every fd of slurmstepd's (the tasks' pipe ends among them:
         * holding those would keep slurmstepd's IO waiting for EOF). */
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, NULL);
        close_all_except(sv[1]);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
            if (devnull > 2)
                close(devnull);
        }
        if (sv[1] <= 2) {          /* keep the socket clear of the std fds just made */
            int moved = fcntl(sv[1], F_DUPFD_CLOEXEC, 3);
            sv[1] = moved;
        }
        if (place == GPA_PLACE_OWN_CGROUP) {
            int err = move_to_own_cgroup(own);
            send(sv[1], &err, sizeof(err), MSG_NOSIGNAL);
            if (err)
                _exit(1);
        }
        if (become_user(uid, gid, groups, ngroups) != 0)
            _exit(1);
        setsid();
        /* Two threads and about ten fds per local task (its pipes, Slurm's outputs, pidfd,
         * handoff socket, log, job dir): the soft limit of slurmstepd's 1024 would refuse them
         * past ~100 tasks on a node (the task then starts its own copier). */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
            nofile.rlim_cur = nofile.rlim_max;
            setrlimit(RLIMIT_NOFILE, &nofile);
        }
        host_main(sv[1], cfg);
    }
    free(groups);
    close(sv[1]);
    if (pid < 0) {
        slurm_info("gpualert: no copier host (fork: %s); copiers start in the tasks",
                   strerror(errno));
        close(sv[0]);
        return;
    }
    int err = place == GPA_PLACE_OWN_CGROUP ? host_moved(sv[0]) : 0;
    if (err) {
        /* The host could not leave the step (it ends itself): the safe path. */
        slurm_info("gpualert: cgroup v2: the copier host cannot move to %s: %s; copiers start "
                   "in the tasks", own, strerror(err));
        close(sv[0]);
        return;
    }
    h->sock = sv[0];
    h->tasks_forked = 0;
}

void host_close(struct host *h)
{
    if (h->sock >= 0)
        close(h->sock);
    h->sock = -1;
}

/* slurmstepd, after each task's fork: once every local task has its copy, ours goes. */
void host_task_forked(spank_t sp, struct host *h)
{
    uint32_t ntasks = 0;
    if (h->sock < 0)
        return;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS ||
        (uint32_t)++h->tasks_forked >= ntasks)
        host_close(h);
}

/* In the task (our code, before exec): hands the copier's fds to the host. */
int host_spawn(struct host *h, int fds[CF_N], const struct copier_spec *spec)
{
    int sock = h->sock;
    h->sock = -1;                  /* the program we exec must not inherit it */
    if (sock < 0)
        return 0;
    int ack[2];
    if (pipe2(ack, O_CLOEXEC) != 0) {
        close(sock);
        return 0;
    }
    struct host_msg m = {.spec = *spec};
    int send[CF_N + 1], n = 0;
    for (int i = 0; i < CF_N; i++)
        if (fds[i] >= 0) {
            m.have |= 1u << i;
            send[n++] = fds[i];
        }
    send[n++] = ack[1];
    char cbuf[CMSG_SPACE(sizeof(int) * (CF_N + 1))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {&m, sizeof(m)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), send, sizeof(int) * (size_t)n);
    ssize_t r;
    while ((r = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    close(sock);
    close(ack[1]);
    if (r != (ssize_t)sizeof(m)) {
        close(ack[0]);
        return 0;                  /* no host: nothing of ours left with it */
    }
    int rc = -1;
    char b = 0;
    struct pollfd p = {ack[0], POLLIN, 0};
    for (;;) {
        int pr = poll(&p, 1, HOST_ACK_MS);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;                 /* no answer in time: a copier may still come; untapped */
        ssize_t k = read(ack[0], &b, 1);
        if (k < 0 && errno == EINTR)
            continue;
        rc = k == 1 && b == '1' ? 1 : k == 0 ? 0 : -1;
        break;
    }
    close(ack[0]);
    if (rc < 0)
        errno = ETIMEDOUT;
    return rc;
}
