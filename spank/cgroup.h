#ifndef GPUALERT_CGROUP_H
#define GPUALERT_CGROUP_H

/* The node's cgroup layout, from the filesystem types under ROOT (/sys/fs/cgroup). */
enum gpa_cgroup_mode { GPA_CG_NONE, GPA_CG_V1, GPA_CG_HYBRID, GPA_CG_V2 };
enum gpa_cgroup_mode gpa_cgroup_mode(const char *root);
const char *gpa_cgroup_mode_name(enum gpa_cgroup_mode m);
/* 1 when the process whose /proc/<pid>/cgroup is PROC_CGROUP sits in a step's cgroup. */
int gpa_stepd_in_step_cgroup(const char *proc_cgroup, enum gpa_cgroup_mode mode);

#endif
