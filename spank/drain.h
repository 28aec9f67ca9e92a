/*
 * The drain handshake (drain.c), both ends in one place and one format: the task binds the
 * socket, its copier answers on it, task_exit (root, in slurmstepd) asks.
 */
#ifndef GPUALERT_DRAIN_H
#define GPUALERT_DRAIN_H

#include "gpualert.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#ifndef DRAIN_WAIT_MS
#define DRAIN_WAIT_MS 10000    /* task_exit waits at most this long per step, all tasks */
#endif
#define DRAIN_MAX_CONNS 8

/* One random number per local task, made in slurmstepd before it forks them. */
struct drain_names {
    uint64_t *nonce;
    uint32_t n;
};
void drain_names_make(struct drain_names *dn, uint32_t ntasks);
void drain_socket_name(const struct drain_names *dn, const struct task_id *id,
                       struct sockaddr_un *sa, socklen_t *len);

/* The task, before its copier starts: the bound, listening socket, or -1. */
int drain_listen(const struct drain_names *dn, const struct task_id *id);

/* The copier's end: the listening socket and the connections waiting for an answer. */
struct drain_listener {
    int lsock;                 /* -1 if unavailable */
    int conns[DRAIN_MAX_CONNS], nconns;
};
void drain_accept(struct drain_listener *l);
/* Answers (and closes) every waiting connection with dr. */
void drain_answer(struct drain_listener *l, const struct drain_report *dr);

/* task_exit's end: sets *deadline once per step (DRAIN_WAIT_MS from the first call). */
void drain_deadline(struct timespec *deadline);
/* Asks the task's copier, bounded by deadline; dr is left as it was when nobody answers. */
void drain_ask(const struct drain_names *dn, const struct task_id *id,
               const struct timespec *deadline, struct drain_report *dr);

#endif
