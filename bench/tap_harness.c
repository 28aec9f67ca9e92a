/*
 * The tap's own cost per task, without Slurm: plays slurmstepd to the plugin (bench/bench_tap.py
 * --harness builds and runs it). Each step is a fresh process that calls slurm_spank_init,
 * init_post_opt and user_init, forks NTASKS tasks (task_init, then exec /bin/true) with
 * task_post_fork after each fork, reaps them (ignoring other children, as slurmstepd does) and calls task_exit for each.
 * The tasks become HARNESS_UID before task_init, as slurmstepd's do.
 * The SPANK calls the plugin makes are answered here. PLUGIN "none" runs the same steps with no
 * plugin: the baseline. Prints one line per step:
 *   step WALL_MS task_init MEAN_MS task_exit SUM_MS
 * Usage: tap_harness PLUGIN|none NTASKS STEPS SPOOL LOCAL (as root; the plugin makes SPOOL/4242
 * when it is missing, as it does when the Prolog is late)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <grp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

static int cur_task = -1, cur_status, ntasks;
static pid_t cur_pid;
static uint32_t stepid;
/* HARNESS_UID, HARNESS_GID: the job's user (root if unset); HARNESS_RESTARTS: its attempt */
static uid_t job_uid;
static gid_t job_gid;

spank_context_t spank_context(void) { return S_CTX_REMOTE; }
int spank_remote(spank_t sp) { (void)sp; return 1; }
spank_err_t spank_option_register(spank_t sp, struct spank_option *o)
{
    (void)sp; (void)o;
    return ESPANK_SUCCESS;
}
spank_err_t spank_job_control_setenv(spank_t sp, const char *a, const char *b, int c)
{
    (void)sp; (void)a; (void)b; (void)c;
    return ESPANK_SUCCESS;
}
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
    (void)sp;
    if (strcmp(var, "SLURM_RESTART_COUNT") == 0 && getenv("HARNESS_RESTARTS")) {
        snprintf(buf, (size_t)len, "%s", getenv("HARNESS_RESTARTS"));
        return ESPANK_SUCCESS;
    }
    if (strcmp(var, "SLURMD_NODENAME") != 0)
        return ESPANK_ENV_NOEXIST;
    snprintf(buf, (size_t)len, "n1");
    return ESPANK_SUCCESS;
}
spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    (void)sp;
    va_list ap;
    va_start(ap, item);
    void *p = va_arg(ap, void *);
    va_end(ap);
    switch (item) {
    case S_JOB_ID: *(uint32_t *)p = 4242; break;
    case S_JOB_STEPID: *(uint32_t *)p = stepid; break;
    case S_JOB_UID: *(uid_t *)p = job_uid; break;
    case S_JOB_GID: *(gid_t *)p = job_gid; break;
    case S_JOB_LOCAL_TASK_COUNT: *(uint32_t *)p = (uint32_t)ntasks; break;
    case S_TASK_EXIT_STATUS: *(int *)p = cur_status; break;
    case S_TASK_PID: *(pid_t *)p = cur_pid; break;
    case S_TASK_GLOBAL_ID:
    case S_TASK_ID:
        if (cur_task < 0)
            return ESPANK_NOT_TASK;
        *(int *)p = cur_task;
        break;
    default: return ESPANK_BAD_ARG;
    }
    return ESPANK_SUCCESS;
}
void slurm_info(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vfprintf(stderr, f, ap);
    fputc('\n', stderr);
    va_end(ap);
}
void slurm_error(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vfprintf(stderr, f, ap);
    fputc('\n', stderr);
    va_end(ap);
}

typedef int (*cb_t)(spank_t, int, char **);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    ntasks = atoi(argv[2]);
    int steps = atoi(argv[3]);
    if (getenv("HARNESS_UID"))
        job_uid = (uid_t)atoi(getenv("HARNESS_UID"));
    if (getenv("HARNESS_GID"))
        job_gid = (gid_t)atoi(getenv("HARNESS_GID"));
    char spool[4200], local[4200];
    snprintf(spool, sizeof(spool), "spool=%s", argv[4]);
    snprintf(local, sizeof(local), "local=%s", argv[5]);
    char *args[] = {spool, "default=on", local};
    cb_t init = NULL, post_opt = NULL, user_init = NULL, post_fork = NULL, task_init = NULL, task_exit = NULL;
    if (strcmp(argv[1], "none") != 0) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        init = (cb_t)dlsym(h, "slurm_spank_init");
        post_opt = (cb_t)dlsym(h, "slurm_spank_init_post_opt");  /* absent in old builds */
        user_init = (cb_t)dlsym(h, "slurm_spank_user_init");
        post_fork = (cb_t)dlsym(h, "slurm_spank_task_post_fork");
        task_init = (cb_t)dlsym(h, "slurm_spank_task_init");
        task_exit = (cb_t)dlsym(h, "slurm_spank_task_exit");
    }
    /* per task: task_init's time (written by the task), then the step's task_exit total */
    double *t = mmap(NULL, sizeof(double) * (size_t)(ntasks + 1), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int s = 0; s < steps; s++) {
        stepid = (uint32_t)s;
        double t0 = now();
        pid_t stepd = fork();
        if (stepd == 0) {
            if (init) {
                init(NULL, 3, args);
                if (post_opt)
                    post_opt(NULL, 3, args);
                user_init(NULL, 3, args);
            }
            pid_t *pids = calloc((size_t)ntasks, sizeof(pid_t));
            for (int i = 0; i < ntasks; i++) {
                pid_t c = fork();
                if (c == 0) {
                    cur_task = i;
                    /* As slurmstepd's tasks: the job's user before task_init. */
                    if (job_uid != 0 && (setgroups(0, NULL) != 0 || setgid(job_gid) != 0 ||
                                         setuid(job_uid) != 0))
                        _exit(126);
                    double a = now();
                    if (task_init)
                        task_init(NULL, 3, args);
                    t[i] = now() - a;
                    execl("/bin/true", "true", (char *)NULL);
                    _exit(127);
                }
                pids[i] = c;
                cur_task = i;
                if (post_fork)
                    post_fork(NULL, 3, args);
            }
            t[ntasks] = 0;
            for (int done = 0; done < ntasks;) {
                int st;
                pid_t p = wait(&st);
                int found = -1;
                for (int i = 0; i < ntasks; i++)
                    if (pids[i] == p)
                        found = i;
                if (found < 0)
                    continue;
                done++;
                cur_task = found;
                cur_status = st;
                cur_pid = p;
                double a = now();
                if (task_exit)
                    task_exit(NULL, 3, args);
                t[ntasks] += now() - a;
            }
            _exit(0);
        }
        int st;
        waitpid(stepd, &st, 0);
        double wall = now() - t0, ti = 0;
        for (int i = 0; i < ntasks; i++)
            ti += t[i];
        printf("step %.3f task_init %.3f task_exit %.3f\n", wall * 1e3, ti / ntasks * 1e3,
               t[ntasks] * 1e3);
        fflush(stdout);
    }
    return 0;
}
