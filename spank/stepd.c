/*
 * The remote context: slurmstepd (root, or the job's euid in user_init) and each task it
 * forks (task_init, as the user, before exec). The step's state across Slurm's callbacks is
 * one struct: the plugin's arguments, the copier host's socket (host.c), the handoff sockets'
 * names (handoff.c) and the step's handoff deadline. A task is a fork of slurmstepd, so it sees
 * the state as it was when it was forked.
 */
#include "stepd.h"
#include "config.h"
#include "handoff.h"
#include "host.h"
#include "options.h"
#include "records.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>

#define JOB_DIR_BUDGET_MS 3000 /* making the job's spool dir, before its maker gives up */
#define JOB_DIR_WAIT_MS 200    /* slurmstepd's wait for it (the copier waits the rest) */

/* SPANK hands a callback no pointer of ours: the step's state lives here. */
static struct stepd {
    struct plugin_config cfg;
    struct host host;
    struct handoff_names names;
    struct timespec deadline;  /* task_exit's bound, for the whole step (handoff.c) */
} st = {.host = {.sock = -1}};

/* The step's part of id (no rank: slurmstepd's callbacks before the tasks); -1 for steps that
 * are not tapped (extern, interactive) or on error. */
static int get_step_id(spank_t sp, struct task_id *id)
{
    memset(id, 0, sizeof(*id));
    if (spank_get_item(sp, S_JOB_ID, &id->job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &id->step) != ESPANK_SUCCESS ||
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
    /* A requeued job's tasks log into attempt-N/ (docs/CONTRACTS.md, Attempts). */
    char restarts[16];
    if (spank_getenv(sp, "SLURM_RESTART_COUNT", restarts, sizeof(restarts)) == ESPANK_SUCCESS)
        id->attempt = (unsigned)strtoul(restarts, NULL, 10);
    return 0;
}

/* Fills id for a task hook; returns -1 for steps that are not tapped or on error. */
static int get_task_id(spank_t sp, struct task_id *id)
{
    if (get_step_id(sp, id) != 0 ||
        spank_get_item(sp, S_TASK_GLOBAL_ID, &id->rank) != ESPANK_SUCCESS)
        return -1;
    int local = -1;                /* only in the task hooks */
    if (spank_get_item(sp, S_TASK_ID, &local) == ESPANK_SUCCESS && local >= 0) {
        id->local = (uint32_t)local;
        id->has_local = 1;
    }
    return 0;
}

/* This step is watched and has a spool to log into. */
static int tapping(void)
{
    return monitored(st.cfg.default_on) && st.cfg.spool[0] != '\0';
}

int stepd_init(spank_t sp, int ac, char **av)
{
    config_parse(&st.cfg, ac, av);
    /* The option is replayed here from the step's options or the job's environment. */
    options_register(sp);
    return 0;
}

/* slurmstepd (root), options known, before any task: the job's spool dir, if its Prolog has
 * not made it yet (records.c, make_job_dir), so that the job need not wait for the Prolog. */
int stepd_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    struct task_id id;
    if (tapping() && get_step_id(sp, &id) == 0) {
        make_job_dir(&st.cfg, &id, JOB_DIR_BUDGET_MS, JOB_DIR_WAIT_MS);
        host_layout_check(&st.cfg);
    }
    return 0;
}

/* slurmstepd with the job's euid, before any task is forked: the copier host. */
int stepd_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (tapping()) {
        uint32_t ntasks = 0;
        if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) == ESPANK_SUCCESS)
            handoff_names_make(&st.names, ntasks);
        host_start(sp, &st.host, &st.cfg);
    }
    return 0;
}

/* slurmstepd (root) after each task's fork. */
int stepd_task_post_fork(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    host_task_forked(sp, &st.host);
    return 0;
}

/* In the task, as the user, just before exec. Never fails the task. */
int stepd_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    struct task_id id;
    if (!tapping() || get_task_id(sp, &id) != 0)
        return 0;
    /* An interactive terminal stays a terminal. */
    if (isatty(STDOUT_FILENO))
        return 0;
    return tap_start(sp, &id, &st.cfg, &st.host, &st.names);
}

/* slurmstepd (root) when a task ended. Bounded per step; never blocks on the spool. */
int stepd_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    struct task_id id;
    int status = 0;
    pid_t pid = 0;
    host_close(&st.host);
    if (!tapping() || get_task_id(sp, &id) != 0)
        return 0;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
        return 0;
    spank_get_item(sp, S_TASK_PID, &pid);
    handoff_deadline(&st.deadline);
    struct handoff_report dr = {.flushed = -1};
    int copier = handoff_ask(&st.names, &id, &st.deadline, &dr);
    /* The copier cannot log to slurmd's log itself; a spool it could not write is no
     * silent fault, so it is said here. */
    if (dr.log_errno)
        slurm_info("gpualert: job %u %s.%u: output forwarded but not logged: %s", id.job,
                   id.step_name, id.rank, strerror(dr.log_errno));
    /* Root writes the record only where the user cannot reach (the node-local dir); the
     * spool's copy is written by the copier, as the user, off slurmstepd's path: no fork of
     * slurmstepd and no root write in the user's directory per task (spank/README.md). */
    char json[EXIT_RECORD_MAX];
    int n = exit_record_json(json, sizeof(json), &id, status, pid, &dr);
    if (n > 0 && write_local_exit_record(st.cfg.local_dir, &id, json, (size_t)n) != 0)
        slurm_info("gpualert: job %u %s.%u: no node-local exit record in %s: %s", id.job,
                   id.step_name, id.rank, st.cfg.local_dir, strerror(errno));
    if (copier >= 0) {
        if (n > 0)
            handoff_send_record(copier, json, (size_t)n);
        else
            close(copier);
    }
    return 0;
}
