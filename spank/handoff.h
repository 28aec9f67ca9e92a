/*
 * The output handoff (handoff.c), both ends in one place and one format: the task binds the
 * socket, its copier answers on it, task_exit (root, in slurmstepd) asks.
 */
#ifndef GPUALERT_HANDOFF_H
#define GPUALERT_HANDOFF_H

#include "gpualert.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#ifndef HANDOFF_WAIT_MS
#define HANDOFF_WAIT_MS 10000    /* task_exit waits at most this long per step, all tasks */
#endif
#define HANDOFF_MAX_CONNS 8

/* One random number per local task, made in slurmstepd before it forks them. */
struct handoff_names {
    uint64_t *nonce;
    uint32_t n;
};
void handoff_names_make(struct handoff_names *dn, uint32_t ntasks);
void handoff_socket_name(const struct handoff_names *dn, const struct task_id *id,
                         struct sockaddr_un *sa, socklen_t *len);

/* The task, before its copier starts: the bound, listening socket, or -1. */
int handoff_listen(const struct handoff_names *dn, const struct task_id *id);

/* The copier's end: the listening socket, the connections waiting for an answer, and root's
 * answered one, on which task_exit sends the task's exit record back. */
#define HANDOFF_RECORD_MAX 1024
struct handoff_listener {
    int lsock;                 /* -1 if unavailable */
    int conns[HANDOFF_MAX_CONNS], nconns;
    int root[HANDOFF_MAX_CONNS]; /* conns[i]'s peer is root (task_exit in slurmstepd) */
    int rec_fd;                /* root's answered connection, until its record came; or -1 */
    char rec[HANDOFF_RECORD_MAX];
    size_t rec_len;
};
void handoff_accept(struct handoff_listener *l);
/* Answers every waiting connection with dr; root's first one is kept (rec_fd) for the record. */
void handoff_answer(struct handoff_listener *l, const struct handoff_report *dr);
/* Reads what task_exit sent on rec_fd: 1 when the record is whole in rec (rec_len bytes, one
 * line), 0 while it may still come, -1 when it never will (closed, too long, not one line). */
int handoff_take_record(struct handoff_listener *l);

/* task_exit's end: sets *deadline once per step (HANDOFF_WAIT_MS from the first call). */
void handoff_deadline(struct timespec *deadline);
/* Asks the task's copier, bounded by deadline; dr is left as it was when nobody answers.
 * Returns the connection once the copier answered (for handoff_send_record), else -1. */
int handoff_ask(const struct handoff_names *dn, const struct task_id *id,
                const struct timespec *deadline, struct handoff_report *dr);
/* Hands the copier the task's exit record to write as the user, and closes fd. Never waits. */
void handoff_send_record(int fd, const char *json, size_t n);

#endif
