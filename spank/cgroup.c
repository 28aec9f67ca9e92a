/*
 * Which cgroup layout this node runs, and whether slurmstepd's own cgroup is a step's: the
 * copier host (host.c) is started only where it is not (spank/README.md, "cgroup v2").
 * No Slurm calls here, so tests/test_spank_cgroup.py links this file alone.
 */
#define _GNU_SOURCE            /* strtok_r, statfs (built with -std=c11) */
#include "cgroup.h"

#include <stdio.h>
#include <string.h>
#include <sys/vfs.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

static int fs_is(const char *path, long magic)
{
    struct statfs st;
    return statfs(path, &st) == 0 && (long)st.f_type == magic;
}

/* A v1 controller hierarchy is mounted at one of the usual names under root. */
static int has_v1_controller(const char *root)
{
    static const char *const controllers[] = {"freezer", "memory", "cpuset", "devices"};
    char p[4096];
    for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", root, controllers[i]);
        if (fs_is(p, CGROUP_SUPER_MAGIC))
            return 1;
    }
    return 0;
}

enum gpa_cgroup_mode gpa_cgroup_mode(const char *root)
{
    char p[4096];
    /* Unified only (v2): the root itself is the cgroup2 filesystem. A v1 hierarchy mounted
     * inside it is a layout neither Slurm plugin expects: mixed. */
    if (fs_is(root, CGROUP2_SUPER_MAGIC))
        return has_v1_controller(root) ? GPA_CG_MIXED : GPA_CG_V2;
    /* v1 (a tmpfs of per-controller mounts), with or without the unified one beside them. */
    if (!has_v1_controller(root))
        return GPA_CG_NONE;
    snprintf(p, sizeof(p), "%s/unified", root);
    return fs_is(p, CGROUP2_SUPER_MAGIC) ? GPA_CG_HYBRID : GPA_CG_V1;
}

const char *gpa_cgroup_mode_name(enum gpa_cgroup_mode m)
{
    switch (m) {
    case GPA_CG_V1: return "v1";
    case GPA_CG_HYBRID: return "hybrid";
    case GPA_CG_V2: return "v2";
    case GPA_CG_MIXED: return "mixed";
    default: return "none";
    }
}

/* The unified ("0::") and the freezer paths of a /proc/<pid>/cgroup file; -1 unreadable. */
static int read_paths(const char *proc_cgroup, char *unified, char *frz, size_t len,
                      int *have_unified, int *have_freezer)
{
    FILE *f = fopen(proc_cgroup, "re");
    if (!f)
        return -1;
    char line[1024];
    *have_unified = *have_freezer = 0;
    unified[0] = frz[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = '\0';
        const char *controllers = a + 1, *path = b + 1;
        if (a == line + 1 && line[0] == '0' && *controllers == '\0') {
            *have_unified = 1;
            snprintf(unified, len, "%s", path);
        } else {
            /* a controller list such as "freezer" or "cpu,cpuacct": match whole names */
            char list[256];
            snprintf(list, sizeof(list), "%s", controllers);
            for (char *save = NULL, *c = strtok_r(list, ",", &save); c; c = strtok_r(NULL, ",", &save))
                if (!strcmp(c, "freezer")) {
                    *have_freezer = 1;
                    snprintf(frz, len, "%s", path);
                }
        }
    }
    fclose(f);
    return 0;
}

/*
 * Slurm's cgroup plugins put slurmstepd: v1 (proctrack/cgroup) in the job's freezer cgroup,
 * outside its steps'; v2 in job_X/step_Y/slurm, beside the step's user (24.11's names).
 * So the path that decides is the freezer's under v1 or hybrid (the unified one there is
 * systemd's, not Slurm's) and the unified one under v2. No cgroups: no step cgroup either.
 * Unreadable: 1 (cannot tell; the task starts its copier, as before the host existed).
 */
int gpa_stepd_in_step_cgroup(const char *proc_cgroup, enum gpa_cgroup_mode mode)
{
    if (mode == GPA_CG_NONE)
        return 0;
    char unified[1024], frz[1024];
    int have_unified, have_freezer;
    if (read_paths(proc_cgroup, unified, frz, sizeof(unified), &have_unified, &have_freezer))
        return 1;
    const char *path;
    if (mode == GPA_CG_V2)
        path = have_unified ? unified : "";
    else
        path = have_freezer ? frz : unified;
    return strstr(path, "/step_") != NULL;
}

/* A job's cgroup directory: "job_<id>" (to 25.11; 26.05 with CgroupJobIdPaths=yes) or the
 * job's SLUID, "s" and 13 Crockford base-32 digits (26.05's default: cgroup_v2.c,
 * cgroup_p_step_create, print_sluid). NAME runs to the next '/'. */
static int is_job_dir(const char *name)
{
    size_t n = strcspn(name, "/");
    if (n > 4 && strncmp(name, "job_", 4) == 0)
        return strspn(name + 4, "0123456789") == n - 4;
    return n == 14 && name[0] == 's' && strspn(name + 1, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") == 13;
}

/* The cgroup of gpualert's own beside Slurm's scope, for a v2 slurmstepd at PATH
 * (<scope>/<job dir>/step_<id>/slurm); -1 when PATH is not that shape. */
static int own_cgroup_of(const char *path, char *own, size_t len)
{
    /* the step: the last "/step_" component, the job dir the one before it */
    const char *step = NULL;
    for (const char *p = strstr(path, "/step_"); p; p = strstr(p + 1, "/step_"))
        step = p;
    if (!step || step == path)
        return -1;
    const char *job = step - 1;
    while (job > path && *job != '/')
        job--;
    if (*job != '/' || !is_job_dir(job + 1))
        return -1;
    /* slurmstepd's own leaf: "slurm" (24.11: src/plugins/cgroup/v2/cgroup_v2.c,
     * cgroup_p_step_create), "slurm_processes" in the layout's description */
    const char *leaf = strchr(step + 1, '/');
    if (!leaf || (strcmp(leaf, "/slurm") != 0 && strcmp(leaf, "/slurm_processes") != 0))
        return -1;
    /* the scope's parent: job_ sits in the scope (slurmstepd.scope, <node>_slurmstepd.scope) */
    const char *parent_end = job;
    while (parent_end > path && parent_end[-1] != '/')
        parent_end--;
    if (parent_end == path)
        parent_end = path + 1;        /* the scope is the root: ours is at the root too */
    int n = snprintf(own, len, "%.*s%s", (int)(parent_end - path), path, GPA_OWN_CGROUP);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

enum gpa_copier_place gpa_copier_place(const char *proc_cgroup, enum gpa_cgroup_mode mode,
                                       char *own, size_t len)
{
    if (len)
        own[0] = '\0';
    switch (mode) {
    case GPA_CG_NONE:
        return GPA_PLACE_HOST;
    case GPA_CG_V1:
    case GPA_CG_HYBRID: {
        char unified[1024], frz[1024];
        int have_unified, have_freezer;
        if (read_paths(proc_cgroup, unified, frz, sizeof(unified), &have_unified, &have_freezer))
            return GPA_PLACE_UNKNOWN;
        return gpa_stepd_in_step_cgroup(proc_cgroup, mode) ? GPA_PLACE_TASK : GPA_PLACE_HOST;
    }
    case GPA_CG_V2: {
        char unified[1024], frz[1024];
        int have_unified, have_freezer;
        if (read_paths(proc_cgroup, unified, frz, sizeof(unified), &have_unified, &have_freezer) ||
            !have_unified || own_cgroup_of(unified, own, len) != 0)
            return GPA_PLACE_UNKNOWN;
        return GPA_PLACE_OWN_CGROUP;
    }
    default:
        return GPA_PLACE_UNKNOWN;
    }
}

const char *gpa_copier_place_name(enum gpa_copier_place p)
{
    switch (p) {
    case GPA_PLACE_HOST: return "host";
    case GPA_PLACE_OWN_CGROUP: return "own-cgroup";
    case GPA_PLACE_TASK: return "task";
    default: return "unknown";
    }
}
