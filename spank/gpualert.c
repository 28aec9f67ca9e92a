/*
 * gpualert SPANK plugin: the --gpualert[=OPTS] option, SPANK_GPUALERT for the hooks,
 * the per-task output tap and the per-task exit records. See spank/README.md.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(gpualert, 1);

#define OPTS_MAX 1024          /* longest OPTS accepted (it travels in the job's env) */
#ifndef DRAIN_WAIT_MS
#define DRAIN_WAIT_MS 10000    /* task_exit waits at most this long for the copier */
#endif
#define COPY_BUF (64 * 1024)

/* Plugin arguments (plugstack.conf). */
static char spool[PATH_MAX];
static int default_on;

/* The option as the user gave it: opt_given, and its value ("" for bare --gpualert). */
static int opt_given;
static char opt_value[OPTS_MAX + 1];

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option gpualert_option = {
    "gpualert", "[OPTS]",
    "Report why the job failed (OPTS: off | comma-separated mail=ADDR[:ADDR], "
    "notify=fail|always|never, artifacts=GLOB[:GLOB], hang=DURATION, budget=SIZE, "
    "checkpoint=GLOB, recover=on|off)",
    2, 0, opt_cb};

/* ------------------------------------------------------------------ option grammar */

static const char *const known_keys[] = {"mail", "notify", "artifacts", "hang",
                                         "budget", "checkpoint", "recover"};
#define NKEYS (sizeof(known_keys) / sizeof(known_keys[0]))

static int is_addr_char(int c)
{
    return isalnum(c) || strchr("._%+-", c) != NULL;
}

/* local@domain: a non-empty local part, a dotted domain of [A-Za-z0-9-] labels. */
static int valid_addr(const char *s, size_t n)
{
    const char *at = memchr(s, '@', n);
    if (!at || at == s || at == s + n - 1)
        return 0;
    for (const char *p = s; p < at; p++)
        if (!is_addr_char((unsigned char)*p))
            return 0;
    size_t label = 0;
    for (const char *p = at + 1; p < s + n; p++) {
        if (*p == '.') {
            if (label == 0)
                return 0;
            label = 0;
        } else if (isalnum((unsigned char)*p) || *p == '-') {
            label++;
        } else {
            return 0;
        }
    }
    return label > 0;
}

/* A glob: no control characters (',' separates options, ':' list items). */
static int valid_glob(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == ',')
            return 0;
    return 1;
}

/* ITEM[:ITEM...], each item checked by ok(). */
static int valid_list(const char *v, int (*ok)(const char *, size_t))
{
    const char *p = v;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (!ok(p, n))
            return 0;
        if (!colon)
            return 1;
        p = colon + 1;
    }
}

/* A positive number of at most maxdigits digits followed by one unit letter. */
static int valid_amount(const char *v, size_t maxdigits, const char *units)
{
    size_t digits = strspn(v, "0123456789");
    if (digits == 0 || digits > maxdigits || v[digits] == '\0' || v[digits + 1] != '\0')
        return 0;
    if (!strchr(units, v[digits]))
        return 0;
    return strtoll(v, NULL, 10) > 0;
}

static int check_value(const char *key, const char *v)
{
    if (!strcmp(key, "mail"))
        return valid_list(v, valid_addr);
    if (!strcmp(key, "notify"))
        return !strcmp(v, "fail") || !strcmp(v, "always") || !strcmp(v, "never");
    if (!strcmp(key, "artifacts"))
        return valid_list(v, valid_glob);
    if (!strcmp(key, "hang"))
        return valid_amount(v, 9, "smhd");
    if (!strcmp(key, "budget"))
        return valid_amount(v, 12, "kmgKMG");
    if (!strcmp(key, "checkpoint"))
        return valid_glob(v, strlen(v));
    if (!strcmp(key, "recover"))
        return !strcmp(v, "on") || !strcmp(v, "off");
    return 0;
}

static const char *accepted(const char *key)
{
    if (!strcmp(key, "mail"))
        return "one or more addresses local@domain separated by ':'";
    if (!strcmp(key, "notify"))
        return "fail, always or never";
    if (!strcmp(key, "artifacts"))
        return "one or more file globs separated by ':'";
    if (!strcmp(key, "hang"))
        return "a duration like 90s, 30m, 2h or 1d (greater than 0)";
    if (!strcmp(key, "budget"))
        return "a size like 500K, 20M or 1G (greater than 0)";
    if (!strcmp(key, "checkpoint"))
        return "one file glob";
    return "on or off";
}

/*
 * Validates OPTS. Returns 0, or -1 after writing the error to err (the form mirrored by
 * gpualert_slurm.options.parse_options()).
 */
static int validate_opts(const char *opts, char *err, size_t errlen)
{
    if (strlen(opts) > OPTS_MAX) {
        snprintf(err, errlen, "gpualert: bad option list: longer than %d characters", OPTS_MAX);
        return -1;
    }
    if (!strcmp(opts, "off") || !strcmp(opts, "on"))
        return 0;
    if (*opts == '\0') {
        snprintf(err, errlen, "gpualert: empty option list (accepted: --gpualert, "
                 "--gpualert=off, --gpualert=KEY=VALUE[,KEY=VALUE...])");
        return -1;
    }
    char buf[OPTS_MAX + 1];
    int seen[NKEYS] = {0};
    snprintf(buf, sizeof(buf), "%s", opts);
    char *item = buf;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        char *eq = strchr(item, '=');
        if (eq)
            *eq = '\0';
        const char *key = item, *val = eq ? eq + 1 : NULL;
        size_t k;
        for (k = 0; k < NKEYS && strcmp(key, known_keys[k]); k++)
            ;
        if (k == NKEYS) {
            if (!strcmp(key, "off") || !strcmp(key, "on"))
                snprintf(err, errlen, "gpualert: bad option %s: '%s' cannot be combined "
                         "with other options", key, key);
            else if (*key == '\0')
                snprintf(err, errlen, "gpualert: empty option in '%s' (accepted: "
                         "KEY=VALUE[,KEY=VALUE...])", opts);
            else
                snprintf(err, errlen, "gpualert: unknown option %s (accepted: mail, notify, "
                         "artifacts, hang, budget, checkpoint, recover, off)", key);
            return -1;
        }
        if (seen[k]++) {
            snprintf(err, errlen, "gpualert: bad option %s=%s: %s given twice", key,
                     val ? val : "", key);
            return -1;
        }
        if (!val || *val == '\0') {
            snprintf(err, errlen, "gpualert: bad option %s=: %s", key, accepted(key));
            return -1;
        }
        if (!check_value(key, val)) {
            snprintf(err, errlen, "gpualert: bad option %s=%s: %s", key, val, accepted(key));
            return -1;
        }
        if (!comma)
            return 0;
        item = comma + 1;
    }
}

/* Called wherever the option is seen: sbatch/srun (remote=0) and slurmstepd (remote=1). */
static int opt_cb(int val, const char *optarg, int remote)
{
    char err[3 * OPTS_MAX + 512];
    (void)val;
    /* Slurm 22.05 stores a bare --gpualert in SLURM_SPANK__..._gpualert as "(null)", which
     * srun inside the batch script then hands back to us; the batch step gets "". */
    if (optarg && (!strcmp(optarg, "(null)") || (remote && *optarg == '\0')))
        optarg = NULL;
    if (optarg && validate_opts(optarg, err, sizeof(err)) != 0) {
        slurm_error("%s", err);
        /* In slurmstepd the value was already accepted at submit: never fail a task here. */
        return remote ? 0 : -1;
    }
    opt_given = 1;
    snprintf(opt_value, sizeof(opt_value), "%s", optarg ? optarg : "");
    return 0;
}

/* What SPANK_GPUALERT carries: off, on, or the validated options. */
static const char *gpualert_value(void)
{
    if (!opt_given)
        return default_on ? "on" : "off";
    return opt_value[0] ? opt_value : "on";
}

static int monitored(void)
{
    return strcmp(gpualert_value(), "off") != 0;
}

/* ------------------------------------------------------------------ plugin hooks */

static void parse_args(int ac, char **av)
{
    spool[0] = '\0';
    default_on = 0;
    for (int i = 0; i < ac; i++) {
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
        } else {
            slurm_error("gpualert: unknown plugin argument '%s' (accepted: spool=/path, "
                        "default=on|off); ignored", av[i]);
        }
    }
}

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

/* ------------------------------------------------------------------ shared helpers */

struct task_id {
    uint32_t job, step, rank;
    uid_t uid;
    gid_t gid;
    char step_name[16];
    char node[64];
};

/* Fills id; returns -1 for steps that are not tapped (extern, interactive) or on error. */
static int get_task_id(spank_t sp, struct task_id *id)
{
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
    return 0;
}

/* Opens <spool>/<jobid> without following symlinks; -1 if absent. */
static int open_job_dir(const struct task_id *id)
{
    int sfd = open(spool, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return -1;
    char name[16];
    snprintf(name, sizeof(name), "%u", id->job);
    int jfd = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int saved = errno;
    close(sfd);
    errno = saved;
    return jfd;
}

static int write_all(int fd, const char *p, size_t n)
{
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

static void iso_now(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One line to tap.log (fd, or opened in job dir jfd); slurm_info when neither works. */
static void tap_log(int fd, int jfd, const struct task_id *id, const char *fmt, ...)
{
    char msg[512], line[800], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    iso_now(ts, sizeof(ts));
    int n = snprintf(line, sizeof(line), "%s %s %s.%u %s\n", ts, id->node, id->step_name,
                     id->rank, msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = sizeof(line) - 1;
    int own = -1;
    if (fd < 0 && jfd >= 0) {
        fd = own = openat(jfd, "tap.log",
                          O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
        /* As root (task_exit): only a plain file of the user's own, never a hard link. */
        struct stat st;
        if (own >= 0 && geteuid() == 0 &&
            (fstat(own, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
             (st.st_uid != id->uid && (st.st_uid != 0 || fchown(own, id->uid, id->gid) != 0)))) {
            close(own);
            fd = own = -1;
        }
    }
    if (fd < 0 || write_all(fd, line, (size_t)n) != 0)
        slurm_info("gpualert: job %u %.*s", id->job, n - 1, line);
    if (own >= 0)
        close(own);
}

/* ------------------------------------------------------------------ the copier */

struct copier {
    int in[2];       /* read ends of the stdout and stderr pipes */
    int orig[2];     /* where the task's stdout and stderr went before the tap */
    int log;         /* tasks/<step>.<rank>.log, holding the drain lock */
    int pidfd;       /* readable once the task has exited; -1 if the kernel lacks pidfd */
    int jfd;         /* the job dir, where tap.log is made if the copier has a fault */
    int stats;       /* write byte counts and CPU time to tap.log at the end */
};

/*
 * Copies from pipe i: one read (so stdout and stderr take turns, keeping the log close to
 * arrival order), or until the pipe is empty when drain is set. Returns 0 at EOF, else 1.
 */
static int pump(struct copier *c, int i, char *buf, int *log_ok, unsigned long long *bytes,
                const struct task_id *id, int drain)
{
    for (;;) {
        ssize_t n = read(c->in[i], buf, COPY_BUF);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 1;
            tap_log(-1, c->jfd, id, "copier: read from std%s pipe failed: %s",
                    i ? "err" : "out", strerror(errno));
            return 0;
        }
        bytes[i] += (unsigned long long)n;
        /* The user's destination first: it must never lose bytes because the log failed. */
        int fwd_errno = write_all(c->orig[i], buf, (size_t)n) != 0 ? errno : 0;
        if (*log_ok && write_all(c->log, buf, (size_t)n) != 0) {
            tap_log(-1, c->jfd, id, "copier: task log write failed after %llu bytes: %s; "
                    "logging stopped, output still forwarded", bytes[0] + bytes[1] - n,
                    strerror(errno));
            *log_ok = 0;
        }
        if (fwd_errno) {
            /* As without the tap, the task's next write must fail (EPIPE/SIGPIPE, e.g.
             * `srun yes | head`): close our end of its pipe, the caller treats it as EOF. */
            if (fwd_errno != EPIPE)
                tap_log(-1, c->jfd, id, "copier: writing to the original std%s failed: %s; "
                        "closing the task's std%s", i ? "err" : "out", strerror(fwd_errno),
                        i ? "err" : "out");
            return 0;
        }
        if (!drain)
            return 1;
    }
}

static void release_drain_lock(struct copier *c)
{
    if (c->log >= 0)
        flock(c->log, LOCK_UN);
}

static __attribute__((noreturn)) void run_copier(struct copier *c, const struct task_id *id)
{
    static char buf[COPY_BUF];
    unsigned long long bytes[2] = {0, 0};
    int log_ok = 1, open_in = 2;

    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 2; i++)
        fcntl(c->in[i], F_SETFL, fcntl(c->in[i], F_GETFL) | O_NONBLOCK);

    while (open_in > 0) {
        struct pollfd pfd[3];
        int idx[3], n = 0;
        for (int i = 0; i < 2; i++)
            if (c->in[i] >= 0) {
                pfd[n] = (struct pollfd){c->in[i], POLLIN, 0};
                idx[n++] = i;
            }
        if (c->pidfd >= 0) {
            pfd[n] = (struct pollfd){c->pidfd, POLLIN, 0};
            idx[n++] = 2;
        }
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            tap_log(-1, c->jfd, id, "copier: poll failed: %s", strerror(errno));
            break;
        }
        int small = 1;
        for (int k = 0; k < n; k++) {
            if (!pfd[k].revents)
                continue;
            int i = idx[k];
            if (i < 2 && c->in[i] >= 0) {
                int avail = 0;
                if (ioctl(c->in[i], FIONREAD, &avail) == 0 && avail >= COPY_BUF / 2)
                    small = 0;
            }
            if (i == 2) {
                /* The task has exited: drain what it wrote, then let task_exit go on.
                 * Children it left behind may still write; we keep copying that. */
                for (int j = 0; j < 2; j++)
                    if (c->in[j] >= 0 && !pump(c, j, buf, &log_ok, bytes, id, 1)) {
                        close(c->in[j]);
                        c->in[j] = -1;
                        open_in--;
                    }
                release_drain_lock(c);
                close(c->pidfd);
                c->pidfd = -1;
            } else if (c->in[i] >= 0 && !pump(c, i, buf, &log_ok, bytes, id, 0)) {
                close(c->in[i]);
                c->in[i] = -1;
                open_in--;
            }
        }
        /* Trickling output (pipes far from full) while the task runs: let it gather for
         * 0.3 ms so each wake-up copies more. This cut the copier's CPU per GiB about 3x
         * through srun; a full pipe is never made to wait, and the drain at exit never naps. */
        if (small && c->pidfd >= 0) {
            struct timespec nap = {0, 300000};
            nanosleep(&nap, NULL);
        }
    }
    release_drain_lock(c);
    if (c->stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        tap_log(-1, c->jfd, id, "stats: bytes_out=%llu bytes_err=%llu user_s=%ld.%06ld "
                "sys_s=%ld.%06ld", bytes[0], bytes[1], (long)ru.ru_utime.tv_sec,
                (long)ru.ru_utime.tv_usec, (long)ru.ru_stime.tv_sec,
                (long)ru.ru_stime.tv_usec);
    }
    _exit(0);
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Closes every fd except keep[] (the copier must not hold the task's other files). */
static void close_all_but(int *keep, int n)
{
    qsort(keep, (size_t)n, sizeof(int), cmp_int);
    unsigned int lo = 0;
    for (int i = 0; i < n; i++) {
        if (keep[i] < 0)
            continue;
        if ((unsigned int)keep[i] > lo)
            close_range(lo, (unsigned int)keep[i] - 1, 0);
        lo = (unsigned int)keep[i] + 1;
    }
    close_range(lo, ~0U, 0);
}

/* ------------------------------------------------------------------ the tap */

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
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

    int jfd = -1, tfd = -1;
    int fds[9] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
    enum { OUT_R, OUT_W, ERR_R, ERR_W, ORIG_OUT, ORIG_ERR, LOG, PIDFD, NFD };
    const char *what;
    char name[64], stats[8] = "";

    if ((jfd = open_job_dir(&id)) < 0) {
        slurm_info("gpualert: job %u %s %s.%u: no spool dir %s/%u (%s); task not tapped",
                   id.job, id.node, id.step_name, id.rank, spool, id.job, strerror(errno));
        return 0;
    }
    what = "create tasks/";
    if (mkdirat(jfd, "tasks", 0700) != 0 && errno != EEXIST)
        goto fail;
    what = "open tasks/";
    if ((tfd = openat(jfd, "tasks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        goto fail;
    snprintf(name, sizeof(name), "%s.%u.log", id.step_name, id.rank);
    what = "open the task log";
    fds[LOG] = openat(tfd, name, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fds[LOG] < 0)
        goto fail;
    /* Held by the copier until the task's output is drained; task_exit waits on it.
     * Taken before fork, so the lock exists before the task can possibly exit. */
    what = "lock the task log";
    if (flock(fds[LOG], LOCK_EX | LOCK_NB) != 0)
        goto fail;
    what = "make pipes";
    if (pipe2(&fds[OUT_R], O_CLOEXEC) != 0 || pipe2(&fds[ERR_R], O_CLOEXEC) != 0)
        goto fail;
    what = "dup stdout/stderr";
    if ((fds[ORIG_OUT] = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3)) < 0 ||
        (fds[ORIG_ERR] = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)) < 0)
        goto fail;
    /* Lets the copier see the task's end even if children keep the pipes open. */
    fds[PIDFD] = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (spank_getenv(sp, "GPUALERT_TAP_STATS", stats, sizeof(stats)) != ESPANK_SUCCESS)
        stats[0] = '\0';

    what = "fork the copier";
    /* Double fork: the copier is never a child of the user's program (no stray SIGCHLD,
     * nothing for a wait() loop in the program to reap); the middle process exits at once. */
    pid_t pid = fork();
    if (pid < 0)
        goto fail;
    if (pid == 0) {
        pid_t copier = fork();
        if (copier != 0)
            _exit(copier < 0 ? 1 : 0);
        struct copier c = {{fds[OUT_R], fds[ERR_R]}, {fds[ORIG_OUT], fds[ORIG_ERR]},
                           fds[LOG], fds[PIDFD], jfd, stats[0] == '1'};
        int keep[] = {c.in[0], c.in[1], c.orig[0], c.orig[1], c.log, c.pidfd, c.jfd};
        close_all_but(keep, (int)(sizeof(keep) / sizeof(keep[0])));
        run_copier(&c, &id);
    }
    int wst = 0;
    pid_t r;
    while ((r = waitpid(pid, &wst, 0)) < 0 && errno == EINTR)
        ;
    if (r == pid && (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)) {
        errno = EAGAIN;
        goto fail;
    }
    what = "redirect stdout/stderr";
    if (dup2(fds[OUT_W], STDOUT_FILENO) < 0 || dup2(fds[ERR_W], STDERR_FILENO) < 0) {
        /* The copier sees EOF and exits once our pipe ends are closed. */
        dup2(fds[ORIG_OUT], STDOUT_FILENO);
        dup2(fds[ORIG_ERR], STDERR_FILENO);
        goto fail;
    }
    close_fds(fds, NFD);
    close(tfd);
    close(jfd);
    return 0;

fail:
    tap_log(-1, jfd, &id, "tap: cannot %s: %s; task runs untapped", what, strerror(errno));
    close_fds(fds, NFD);
    if (tfd >= 0)
        close(tfd);
    close(jfd);
    return 0;
}

/* ------------------------------------------------------------------ exit records */

/* Waits (bounded) until the copier of this task released its lock on the task log. */
static void wait_for_copier(int tfd, const char *logname)
{
    int fd = openat(tfd, logname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        /* The copier usually needs well under a millisecond: start with short naps. */
        struct timespec start, now, nap = {0, 100000};
        clock_gettime(CLOCK_MONOTONIC, &start);
        while (flock(fd, LOCK_SH | LOCK_NB) != 0 && (errno == EWOULDBLOCK || errno == EINTR)) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
            if (ms >= DRAIN_WAIT_MS) {
                slurm_info("gpualert: copier of %s still busy after %d ms; not waiting longer",
                           logname, DRAIN_WAIT_MS);
                break;
            }
            nanosleep(&nap, NULL);
            if (nap.tv_nsec < 10000000)
                nap.tv_nsec *= 2;
        }
    }
    close(fd);
}

/* Runs in slurmstepd (root) when a task ended. Never follows a symlink of the user's. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    struct task_id id;
    int status = 0;
    pid_t pid = 0;
    if (!spank_remote(sp) || !monitored() || spool[0] == '\0' || get_task_id(sp, &id) != 0)
        return 0;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
        return 0;
    spank_get_item(sp, S_TASK_PID, &pid);

    int jfd = open_job_dir(&id), tfd = -1;
    if (jfd < 0)
        return 0;
    struct stat st;
    /* Only a dir that belongs to the job's user (made by the Prolog) gets root's writes. */
    if (fstat(jfd, &st) != 0 || st.st_uid != id.uid) {
        slurm_info("gpualert: job %u: %s/%u is not owned by uid %u; no exit record", id.job,
                   spool, id.job, (unsigned)id.uid);
        close(jfd);
        return 0;
    }
    tfd = openat(jfd, "tasks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tfd < 0 && errno == ENOENT && mkdirat(jfd, "tasks", 0700) == 0) {
        tfd = openat(jfd, "tasks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (tfd >= 0 && fchown(tfd, id.uid, id.gid) != 0) {
            close(tfd);
            tfd = -1;
        }
    }
    if (tfd < 0 || fstat(tfd, &st) != 0 || st.st_uid != id.uid) {
        tap_log(-1, jfd, &id, "exit record: no usable tasks/ dir");
        goto out;
    }

    char logname[64], final[64], tmp[96];
    snprintf(logname, sizeof(logname), "%s.%u.log", id.step_name, id.rank);
    wait_for_copier(tfd, logname);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char exit_code[16] = "null", sig[16] = "null", json[512];
    if (WIFEXITED(status))
        snprintf(exit_code, sizeof(exit_code), "%d", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        snprintf(sig, sizeof(sig), "%d", WTERMSIG(status));
    int n = snprintf(json, sizeof(json),
                     "{\"node\": \"%s\", \"step\": \"%s\", \"rank\": %u, \"pid\": %d, "
                     "\"exit_code\": %s, \"signal\": %s, \"core_dumped\": %s, "
                     "\"end_time\": %ld.%03ld, \"status\": %d}\n",
                     id.node, id.step_name, id.rank, (int)pid, exit_code, sig,
                     (WIFSIGNALED(status) && WCOREDUMP(status)) ? "true" : "false",
                     (long)ts.tv_sec, ts.tv_nsec / 1000000, status);
    snprintf(final, sizeof(final), "%s.%u.exit", id.step_name, id.rank);
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", final, (int)getpid());
    /* A fresh file (O_EXCL) renamed over the name: a planted link is replaced, never used. */
    int fd = openat(tfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        tap_log(-1, jfd, &id, "exit record: cannot create: %s", strerror(errno));
        goto out;
    }
    int ok = n > 0 && (size_t)n < sizeof(json) && write_all(fd, json, (size_t)n) == 0 &&
             fchown(fd, id.uid, id.gid) == 0 && fsync(fd) == 0;
    int saved = errno;
    close(fd);
    if (!ok || renameat(tfd, tmp, tfd, final) != 0) {
        if (ok)
            saved = errno;
        unlinkat(tfd, tmp, 0);
        tap_log(-1, jfd, &id, "exit record: cannot write: %s", strerror(saved));
        goto out;
    }
    /* No fsync of tasks/: it would cost a journal commit per task at every step's end, and
     * the file's own fsync before the rename already keeps the record whole. */
out:
    if (tfd >= 0)
        close(tfd);
    close(jfd);
    return 0;
}
