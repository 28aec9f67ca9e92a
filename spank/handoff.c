/*
 * No data lost at task end (spank/README.md, "the output handoff"): when a task ends,
 * task_exit (root, in slurmstepd) asks the task's copier over a unix socket in the abstract
 * namespace (no file in the spool, so a stalled spool cannot block it) whether every byte is
 * logged, and waits for the answer, bounded per step. Both ends are here, with the one line
 * they exchange (ANSWER_FMT).
 */
#include "handoff.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <slurm/spank.h>

/* The copier's answer, written and read with this one format. */
#define ANSWER_FMT "flushed=%d bytes=%llu gaps=%llu gap_bytes=%llu first_gap=%llu log_errno=%d\n"

/* One random number per local task (so each task and task_exit, in slurmstepd, know it, and
 * no one else does): the handoff socket's name. An abstract name anyone on the node can bind;
 * a guessable one (uid/job/step/rank) let another user bind it first and so switch a task's
 * output handoff off. /proc/net/unix shows names once bound, so each task has its own
 * number, not one per step. */
void handoff_names_make(struct handoff_names *dn, uint32_t ntasks)
{
    if (ntasks == 0 || ntasks > 65536 || dn->nonce)
        return;
    uint64_t *t = calloc(ntasks, sizeof(*t));
    size_t n = ntasks * sizeof(*t);
    if (!t)
        return;
    if (getrandom(t, n, GRND_NONBLOCK) != (ssize_t)n) {
        free(t);                   /* the guessable name below; the peer check still holds */
        return;
    }
    dn->nonce = t;
    dn->n = ntasks;
}

void handoff_socket_name(const struct handoff_names *dn, const struct task_id *id,
                         struct sockaddr_un *sa, socklen_t *len)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* Abstract namespace: no file in the spool, so the handshake works when it is stalled. */
    int n;
    if (id->has_local && id->local < dn->n)
        n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "gpualert-tap/%u/%016llx",
                     id->uid, (unsigned long long)dn->nonce[id->local]);
    else
        n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "gpualert-tap/%u/%u/%s/%u/%u",
                     id->uid, id->job, id->step_name, id->rank, id->attempt);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---------------------------------------------------------------- the task */

/* Bound before the task can exit, so task_exit always finds it while the copier runs. */
int handoff_listen(const struct handoff_names *dn, const struct task_id *id)
{
    struct sockaddr_un sa;
    socklen_t salen;
    handoff_socket_name(dn, id, &sa, &salen);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 &&
        (bind(fd, (struct sockaddr *)&sa, salen) != 0 || listen(fd, HANDOFF_MAX_CONNS) != 0)) {
        slurm_info("gpualert: job %u %s.%u: no output handoff: %s", id->job, id->step_name,
                   id->rank, strerror(errno));
        close(fd);
        fd = -1;
    }
    return fd;
}

/* ---------------------------------------------------------------- the copier */

/* Only task_exit (slurmstepd, root) or the job's user may ask: the bound name is in
 * /proc/net/unix, and another user's connections filled the slots (the real ask was closed)
 * or were answered first (the copier left before task_exit asked): log_flushed null. */
static int peer_uid(int c, uid_t *uid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return -1;
    *uid = cred.uid;
    return 0;
}

void handoff_accept(struct handoff_listener *l)
{
    int c;
    uid_t uid;
    while (l->lsock >= 0 &&
           (c = accept4(l->lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
        if (l->nconns < HANDOFF_MAX_CONNS && peer_uid(c, &uid) == 0 &&
            (uid == 0 || uid == geteuid())) {
            l->root[l->nconns] = uid == 0;
            l->conns[l->nconns++] = c;
        } else {
            close(c);
        }
    }
}

void handoff_answer(struct handoff_listener *l, const struct handoff_report *dr)
{
    char line[256];
    int n = snprintf(line, sizeof(line), ANSWER_FMT, dr->flushed, dr->bytes, dr->gaps,
                     dr->gap_bytes, dr->first_gap, dr->log_errno);
    for (int k = 0; k < l->nconns; k++) {
        if (write(l->conns[k], line, (size_t)n) < 0) {
            /* task_exit gave up on us; nothing to do */
        }
        /* Only root (task_exit) may hand us the exit record: the user's own asks are closed. */
        if (l->root[k] && l->rec_fd < 0 && l->rec_len == 0)
            l->rec_fd = l->conns[k];
        else
            close(l->conns[k]);
    }
    l->nconns = 0;
}

int handoff_take_record(struct handoff_listener *l)
{
    if (l->rec_fd < 0)
        return -1;
    for (;;) {
        ssize_t n = read(l->rec_fd, l->rec + l->rec_len, sizeof(l->rec) - l->rec_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n > 0) {
            l->rec_len += (size_t)n;
            if (l->rec_len < sizeof(l->rec))
                continue;
        }
        break;                     /* EOF, an error, or full */
    }
    close(l->rec_fd);
    l->rec_fd = -1;
    /* One JSON line, nothing after it; anything else is not task_exit's record. */
    int whole = l->rec_len > 2 && l->rec_len < sizeof(l->rec) && l->rec[0] == '{' &&
                l->rec[l->rec_len - 1] == '\n' && memchr(l->rec, '\n', l->rec_len) ==
                l->rec + l->rec_len - 1 && memchr(l->rec, '\0', l->rec_len) == NULL;
    if (!whole)
        l->rec_len = 0;
    return whole ? 1 : -1;
}

/* ---------------------------------------------------------------- task_exit */

static long ms_until(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

/* One budget for the whole step (this slurmstepd): tasks ending one after another do not
 * each get HANDOFF_WAIT_MS. */
void handoff_deadline(struct timespec *deadline)
{
    if (deadline->tv_sec != 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += HANDOFF_WAIT_MS / 1000;
    deadline->tv_nsec += (HANDOFF_WAIT_MS % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec++;
        deadline->tv_nsec -= 1000000000L;
    }
}

int handoff_ask(const struct handoff_names *dn, const struct task_id *id,
                const struct timespec *deadline, struct handoff_report *dr)
{
    struct sockaddr_un sa;
    socklen_t salen;
    handoff_socket_name(dn, id, &sa, &salen);
    /* Non-blocking: a connect to a listener whose backlog the job filled would otherwise
     * block slurmstepd (root) for as long as the job likes. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), answered = 0;
    if (fd < 0)
        return -1;
    while (connect(fd, (struct sockaddr *)&sa, salen) != 0) {
        if (errno != EAGAIN || ms_until(deadline) <= 0)
            goto out;              /* no copier: never tapped, or already finished */
        struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
    }
    /* Anyone can bind an abstract name: only the job's user's copier is listened to. */
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != id->uid)
        goto out;
    char line[256];
    size_t got = 0;
    for (;;) {
        long left = ms_until(deadline);
        if (left <= 0) {
            slurm_info("gpualert: job %u %s.%u: the copier did not finish logging within "
                       "%d ms; not waiting longer", id->job, id->step_name, id->rank,
                       HANDOFF_WAIT_MS);
            break;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = read(fd, line + got, sizeof(line) - 1 - got);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        line[got] = '\0';
        if (strchr(line, '\n') || got == sizeof(line) - 1) {
            int flushed = 0;
            if (sscanf(line, ANSWER_FMT, &flushed, &dr->bytes, &dr->gaps, &dr->gap_bytes,
                       &dr->first_gap, &dr->log_errno) == 6) {
                dr->flushed = flushed;
                answered = 1;
            }
            break;
        }
    }
out:
    if (answered)
        return fd;
    close(fd);
    return -1;
}

void handoff_send_record(int fd, const char *json, size_t n)
{
    /* Non-blocking, into an empty socket buffer: the line goes whole or not at all, and a
     * copier that stopped reading cannot hold slurmstepd. Closing ends the record. */
    if (send(fd, json, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the copier is gone: the node Epilog moves the local record in */
    }
    close(fd);
}
