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

enum gpa_cgroup_mode gpa_cgroup_mode(const char *root)
{
    char p[4096];
    /* Unified only (v2): the root itself is the cgroup2 filesystem. */
    if (fs_is(root, CGROUP2_SUPER_MAGIC))
        return GPA_CG_V2;
    /* v1 (a tmpfs of per-controller mounts), with or without the unified one beside them. */
    int v1 = 0;
    static const char *const controllers[] = {"freezer", "memory", "cpuset", "devices"};
    for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]) && !v1; i++) {
        snprintf(p, sizeof(p), "%s/%s", root, controllers[i]);
        v1 = fs_is(p, CGROUP_SUPER_MAGIC);
    }
    if (!v1)
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
    default: return "none";
    }
}

/*
 * Slurm's cgroup plugins put slurmstepd: v1 (proctrack/cgroup) in the job's freezer cgroup,
 * outside its steps'; v2 in job_X/step_Y/slurm_processes, beside the step's user_processes.
 * So the path that decides is the freezer's under v1 or hybrid (the unified one there is
 * systemd's, not Slurm's) and the unified one under v2. No cgroups: no step cgroup either.
 * Unreadable: 1 (cannot tell; the task starts its copier, as before the host existed).
 */
int gpa_stepd_in_step_cgroup(const char *proc_cgroup, enum gpa_cgroup_mode mode)
{
    if (mode == GPA_CG_NONE)
        return 0;
    FILE *f = fopen(proc_cgroup, "re");
    if (!f)
        return 1;
    char line[1024], unified[1024] = "", frz[1024] = "";
    int have_unified = 0, have_freezer = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = '\0';
        const char *controllers = a + 1, *path = b + 1;
        if (a == line + 1 && line[0] == '0' && *controllers == '\0') {
            have_unified = 1;
            snprintf(unified, sizeof(unified), "%s", path);
        } else {
            /* a controller list such as "freezer" or "cpu,cpuacct": match whole names */
            char list[256];
            snprintf(list, sizeof(list), "%s", controllers);
            for (char *save = NULL, *c = strtok_r(list, ",", &save); c; c = strtok_r(NULL, ",", &save))
                if (!strcmp(c, "freezer")) {
                    have_freezer = 1;
                    snprintf(frz, sizeof(frz), "%s", path);
                }
        }
    }
    fclose(f);
    const char *path;
    if (mode == GPA_CG_V2)
        path = have_unified ? unified : "";
    else
        path = have_freezer ? frz : unified;
    return strstr(path, "/step_") != NULL;
}
