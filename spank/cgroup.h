#ifndef GPUALERT_CGROUP_H
#define GPUALERT_CGROUP_H

#include <stddef.h>

/* The node's cgroup layout, from the filesystem types under ROOT (/sys/fs/cgroup). Mixed: a
 * cgroup2 root with a v1 hierarchy mounted inside it. */
enum gpa_cgroup_mode { GPA_CG_NONE, GPA_CG_V1, GPA_CG_HYBRID, GPA_CG_V2, GPA_CG_MIXED };
enum gpa_cgroup_mode gpa_cgroup_mode(const char *root);
const char *gpa_cgroup_mode_name(enum gpa_cgroup_mode m);
/* 1 when the process whose /proc/<pid>/cgroup is PROC_CGROUP sits in a step's cgroup. */
int gpa_stepd_in_step_cgroup(const char *proc_cgroup, enum gpa_cgroup_mode mode);

/* Where the copier host goes, from slurmstepd's /proc/<pid>/cgroup (spank/README.md,
 * "cgroup v2"): HOST, where slurmstepd is (outside the step: v1, hybrid, no cgroups);
 * OWN_CGROUP, gpualert's own cgroup beside Slurm's scope (v2; its path, relative to the
 * cgroup2 root, in OWN); TASK, no host (slurmstepd is in the step's cgroup under v1);
 * UNKNOWN, a layout the plugin does not know (mixed, unreadable, not Slurm's shape): no host. */
enum gpa_copier_place { GPA_PLACE_HOST, GPA_PLACE_OWN_CGROUP, GPA_PLACE_TASK, GPA_PLACE_UNKNOWN };
#define GPA_OWN_CGROUP "gpualert_copiers"
#define GPA_CGROUP_ROOT "/sys/fs/cgroup"
enum gpa_copier_place gpa_copier_place(const char *proc_cgroup, enum gpa_cgroup_mode mode,
                                       char *own, size_t len);
const char *gpa_copier_place_name(enum gpa_copier_place p);

#endif
