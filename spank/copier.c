/*
 * The tap: one copier per task that forwards every byte of the task's stdout and stderr to
 * where Slurm would have put it, and logs it to the spool. A copier is two threads of the
 * step's copier host (host.c); where no host runs (an unknown cgroup layout, say), it is a
 * process the task forks (tap.c).
 *
 * Two rules shape it (spank/README.md):
 * - The job never notices. The copier leaves the job's process group and session and blocks
 *   every signal it can, so nothing the job sends or receives kills it. Forwarding to Slurm's
 *   destination comes first and never waits for the spool: a writer thread takes the log side
 *   from a bounded buffer, and when the spool cannot keep up the copier drops spool bytes and
 *   records the gap instead of slowing the task.
 * - The task's path does no spool I/O at all: the log is opened by the writer thread, so a
 *   hung mount stalls logging, never the task's start or its output.
 * When the task ends, slurm_spank_task_exit asks the copier (over an abstract unix socket, no
 * file in the spool: handoff.c) whether everything was logged, and puts the answer in the exit
 * record. Who starts a copier: the host (host.c) or, without one, the task (tap.c).
 */
#include "copier.h"
#include "handoff.h"
#include "records.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#define COPY_BUF (64 * 1024)
#define TAIL_BYTES (4u << 20)      /* what a capped batch log keeps of its end */
#define MAX_GAPS 16                /* gaps listed one by one in tap.log; the rest are totals */
#define LINGER_MS 3000             /* after EOF, how long to wait for task_exit to ask */
#define FINAL_FLUSH_MS 60000       /* after EOF, how long the log may take to catch up */
#define HOSTED_FLUSH_MS 3600000    /* the same for a hosted copier: the step does not wait
                                      for it, so it may outlast a stalled spool */
#define JOB_DIR_WAIT_MS 3000       /* for the job dir slurmstepd's child makes (records.c) */
#define STUCK_MS 1000              /* a writer this long without progress is stuck (hung spool) */
#define RECORD_WAIT_MS 1000        /* after answering root, how long its exit record may take */
#define THREAD_STACK (256 * 1024)  /* the forwarder's and the writer's stacks */

/* The exit record task_exit sends back once answered (handoff.c), for the writer to put in
 * tasks/. */
enum { REC_AWAITED, REC_READY, REC_NONE };

/* The log side's buffer: a queue of chunks, so the copier's memory (in the job's cgroup) is
 * what the spool is behind by, not the bound: a ring would touch all of its pages. */
#define CHUNK_DATA (64 * 1024 - 64)
struct chunk {
    struct chunk *next;
    size_t off, len;               /* written out up to off, filled up to len */
    char data[CHUNK_DATA];
};

struct gap {
    unsigned long long log_off, stream_off, size;
};

struct tap {
    int in[2];                     /* read ends of the stdout and stderr pipes */
    int orig[2];                   /* where the task's stdout and stderr went before the tap */
    int pidfd;                     /* readable once the task exited; -1 without pidfd */
    struct handoff_listener handoff; /* the handshake with task_exit (handoff.c) */
    int stats;                     /* GPUALERT_TAP_STATS=1: byte counts and CPU to tap.log */
    int hosted;                    /* started by the host, outside the step's cgroup */
    int threaded;                  /* two threads of the host's, not a process of its own */
    int refs;                      /* threaded: the threads still using this (under mu) */
    char *buf;                     /* the forwarder's read buffer, COPY_BUF */
    struct rusage fwd_ru;          /* threaded, stats: the forwarder's CPU once at EOF */
    const struct plugin_config *cfg;
    struct task_id id;
    pid_t task_pid;
    time_t start_time;
    unsigned long long bytes[2];   /* what the task wrote, stdout and stderr */

    /* The spool side, shared with the writer thread under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct chunk *qhead, *qtail, *spare;
    size_t cap, len;               /* bound, and bytes queued */
    int eof, writer_idle, writer_done, writer_dead, log_errno;
    int log_closed;                /* the writer closed the log: task_exit may have its answer */
    long answered_at;              /* when root (task_exit) was answered; -1 before */
    int rec_state;                 /* REC_*: the exit record in handoff.rec, once REC_READY */
    int wake;                      /* eventfd: the writer's word to the forwarder's last loop */
    long progress_ms;              /* when the writer last finished a write */
    unsigned long long put;        /* bytes accepted for the log */
    unsigned long long ngaps, gap_bytes, first_gap;
    struct gap gaps[MAX_GAPS];
    unsigned long long gaps_logged;
    char note[4][160];
    int nnotes;

    /* The batch step's log keeps its head and its tail (batch_log_max). */
    unsigned long long head_max, cut;
    char *tail;
    size_t tail_head, tail_len;
};

static long now_ms(void);
static void drop_queue_all(struct tap *t);

/* The host's copiers still at work (threaded), for copier_wait_all. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static int live;

static void live_add(int n)
{
    pthread_mutex_lock(&live_mu);
    live += n;
    if (live == 0)
        pthread_cond_broadcast(&live_cv);
    pthread_mutex_unlock(&live_mu);
}

void copier_wait_all(void)
{
    pthread_mutex_lock(&live_mu);
    while (live > 0)
        pthread_cond_wait(&live_cv, &live_mu);
    pthread_mutex_unlock(&live_mu);
}

/* Everything a copier holds, let go: its fds, its queue, itself (threaded: the last of its
 * two threads to finish does it; a process copier just exits). */
static void tap_free(struct tap *t)
{
    int fds[] = {t->in[0], t->in[1], t->orig[0], t->orig[1], t->pidfd, t->handoff.lsock,
                 t->handoff.rec_fd, t->wake};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int k = 0; k < t->handoff.nconns; k++)
        close(t->handoff.conns[k]);
    drop_queue_all(t);
    free(t->tail);
    free(t->buf);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    live_add(-1);
}

static void tap_release(struct tap *t)
{
    if (!t->threaded)
        return;
    pthread_mutex_lock(&t->mu);
    int last = --t->refs == 0;
    pthread_mutex_unlock(&t->mu);
    if (last)
        tap_free(t);
}

/* Wakes the forwarder's last loop (it polls wake[0]) when the writer closed the log or is done. */
static void wake_forwarder(struct tap *t)
{
    uint64_t one = 1;
    if (t->wake >= 0 && write(t->wake, &one, sizeof(one)) < 0) {
        /* at its limit: a wake-up is pending anyway */
    }
}

/* The exit record's fate, told to the writer (which waits for it before it is done). */
static void record_is(struct tap *t, int state)
{
    pthread_mutex_lock(&t->mu);
    if (t->rec_state == REC_AWAITED) {
        t->rec_state = state;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------- the spool side */

static void add_note(struct tap *t, const char *msg)
{
    pthread_mutex_lock(&t->mu);
    if (t->nnotes < 4)
        snprintf(t->note[t->nnotes++], sizeof(t->note[0]), "%s", msg);
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Appends to the queue, under mu; -1 (nothing queued) when memory runs out. */
static int queue_bytes(struct tap *t, const char *p, size_t n)
{
    size_t need = n;
    struct chunk *c = t->qtail;
    size_t room = c ? CHUNK_DATA - c->len : 0;
    /* Allocate first, so that a failure leaves the queue as it was. */
    struct chunk *fresh = NULL, **link = &fresh;
    for (size_t k = need > room ? need - room : 0; k > 0;) {
        struct chunk *x = t->spare;
        if (x)
            t->spare = x->next;
        else if (!(x = malloc(sizeof(*x)))) {
            while (fresh) {
                struct chunk *nx = fresh->next;
                free(fresh);
                fresh = nx;
            }
            return -1;
        }
        x->next = NULL;
        x->off = x->len = 0;
        *link = x;
        link = &x->next;
        k -= k < CHUNK_DATA ? k : CHUNK_DATA;
    }
    if (c && room) {
        size_t k = n < room ? n : room;
        memcpy(c->data + c->len, p, k);
        c->len += k;
        p += k;
        n -= k;
    }
    for (struct chunk *x = fresh; x; x = x->next) {
        size_t k = n < CHUNK_DATA ? n : CHUNK_DATA;
        memcpy(x->data, p, k);
        x->len = k;
        p += k;
        n -= k;
        if (t->qtail)
            t->qtail->next = x;
        else
            t->qhead = x;
        t->qtail = x;
    }
    return 0;
}

/* Logging stopped: what was queued is let go, under mu. */
static void drop_queue(struct tap *t)
{
    while (t->qhead) {
        struct chunk *x = t->qhead;
        t->qhead = x->next;
        free(x);
    }
    t->qtail = NULL;
    t->len = 0;
}

/* The queue and its spares, freed (threaded copiers, whose memory the host keeps). */
static void drop_queue_all(struct tap *t)
{
    drop_queue(t);
    while (t->spare) {
        struct chunk *x = t->spare;
        t->spare = x->next;
        free(x);
    }
}

/* Takes n bytes for the log, or records them as a gap when the buffer is full. */
static void log_put(struct tap *t, const char *p, size_t n, unsigned long long stream_off)
{
    pthread_mutex_lock(&t->mu);
    if (t->writer_dead) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    if (t->cap - t->len >= n && queue_bytes(t, p, n) == 0) {
        t->len += n;
        t->put += n;
        if (t->writer_idle)
            pthread_cond_signal(&t->cv);
    } else {
        struct gap *last = t->ngaps && t->ngaps <= MAX_GAPS ? &t->gaps[t->ngaps - 1] : NULL;
        if (last && last->log_off == t->put && last->stream_off + last->size == stream_off) {
            last->size += n;
        } else {
            if (t->ngaps < MAX_GAPS)
                t->gaps[t->ngaps] = (struct gap){t->put, stream_off, n};
            if (t->ngaps == 0)
                t->first_gap = stream_off;
            t->ngaps++;
        }
        t->gap_bytes += n;
    }
    pthread_mutex_unlock(&t->mu);
}

/* The batch step's log: the first head_max bytes, then only the last TAIL_BYTES in memory. */
static void log_output(struct tap *t, const char *p, size_t n, unsigned long long stream_off)
{
    if (t->head_max && t->put + t->gap_bytes + n > t->head_max && t->tail == NULL)
        t->tail = malloc(TAIL_BYTES);
    if (!t->head_max || t->tail == NULL) {
        log_put(t, p, n, stream_off);
        return;
    }
    unsigned long long room = t->head_max > t->put + t->gap_bytes ?
                              t->head_max - t->put - t->gap_bytes : 0;
    if (room > n)
        room = n;
    if (room)
        log_put(t, p, (size_t)room, stream_off);
    for (size_t i = (size_t)room; i < n;) {
        size_t at = (t->tail_head + t->tail_len) % TAIL_BYTES;
        size_t k = n - i < TAIL_BYTES - at ? n - i : TAIL_BYTES - at;
        memcpy(t->tail + at, p + i, k);
        t->tail_len += k;
        if (t->tail_len > TAIL_BYTES) {
            t->tail_head = (t->tail_head + t->tail_len - TAIL_BYTES) % TAIL_BYTES;
            t->tail_len = TAIL_BYTES;
        }
        i += k;
    }
    t->cut += n - room;
}

/* When the batch step ends: a line saying what was cut, then the tail. */
static void flush_tail(struct tap *t)
{
    if (!t->cut)
        return;
    char marker[256];
    int m = snprintf(marker, sizeof(marker),
                     "\n[gpualert: %llu bytes of the batch step's output are not in this log "
                     "(batch_log_max=%llu); its last %zu bytes follow]\n",
                     t->cut - t->tail_len, t->head_max, t->tail_len);
    unsigned long long off = t->bytes[0] + t->bytes[1] - t->tail_len;
    log_put(t, marker, (size_t)m, off);
    size_t first = TAIL_BYTES - t->tail_head < t->tail_len ? TAIL_BYTES - t->tail_head
                                                          : t->tail_len;
    log_put(t, t->tail + t->tail_head, first, off);
    log_put(t, t->tail, t->tail_len - first, off + first);
    char note[160];
    snprintf(note, sizeof(note), "batch log capped: %llu bytes left out after the first %llu "
             "(batch_log_max)", t->cut - t->tail_len, t->head_max);
    add_note(t, note);
    t->head_max = 0;               /* what leftover processes still write is logged as is */
    t->cut = 0;
}

static int open_task_log(struct tap *t, int jfd)
{
    int adir = open_attempt_dir(jfd, &t->id, 0);
    int tdir = adir >= 0 ? open_tasks_dir(adir, &t->id, 0) : -1;
    int fd = -1;
    if (tdir >= 0) {
        char name[64];
        snprintf(name, sizeof(name), "%s.%u.log", t->id.step_name, t->id.rank);
        fd = openat(tdir, name,
                    O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)) {
            close(fd);
            fd = -1;
            errno = EINVAL;
        }
        if (fd >= 0) {
            fcntl(fd, F_SETFL, O_WRONLY | O_APPEND);
            write_start_record(tdir, &t->id, t->task_pid, t->start_time);
        }
    }
    int saved = errno;
    if (tdir >= 0)
        close(tdir);
    if (adir >= 0)
        close(adir);
    errno = saved;
    return fd;
}

/* Writes out what is new in notes and gaps; called by the writer without the lock held. */
static void log_news(struct tap *t, int jfd)
{
    char notes[4][160];
    struct gap gaps[MAX_GAPS];
    int nn, ng = 0;
    pthread_mutex_lock(&t->mu);
    nn = t->nnotes;
    memcpy(notes, t->note, sizeof(notes));
    t->nnotes = 0;
    unsigned long long upto = t->ngaps < MAX_GAPS ? t->ngaps : MAX_GAPS;
    /* The last gap may still grow: log it once the buffer took bytes after it. */
    if (upto && t->gaps[upto - 1].log_off == t->put && !t->eof)
        upto--;
    for (unsigned long long i = t->gaps_logged; i < upto; i++)
        gaps[ng++] = t->gaps[i];
    t->gaps_logged = upto;
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < nn; i++)
        tap_log(jfd, &t->id, 1, "%s", notes[i]);
    for (int i = 0; i < ng; i++)
        tap_log(jfd, &t->id, 1, "gap: %llu bytes not logged at log offset %llu (output offset "
                "%llu): the spool did not keep up; the job's own output has them",
                gaps[i].size, gaps[i].log_off, gaps[i].stream_off);
}

static void *writer_main(void *arg)
{
    struct tap *t = arg;
    int jfd = open_job_dir(t->cfg->spool, &t->id);
    /* slurmstepd's maker of the job dir may still be at work (a slow disk; records.c,
     * make_job_dir): the output waits in the buffer meanwhile, the task does not. */
    long until = now_ms() + JOB_DIR_WAIT_MS;
    while (jfd < 0 && errno == ENOENT && now_ms() < until) {
        struct timespec nap = {0, 10 * 1000000};
        nanosleep(&nap, NULL);
        jfd = open_job_dir(t->cfg->spool, &t->id);
    }
    int log = jfd >= 0 ? open_task_log(t, jfd) : -1;
    if (log < 0) {
        int e = errno;
        tap_log(jfd, &t->id, 1, "tap: cannot open the task log in %s/%u: %s; output is forwarded "
                "but not logged", t->cfg->spool, t->id.job, strerror(e));
        pthread_mutex_lock(&t->mu);
        t->writer_dead = 1;
        t->log_errno = e ? e : EIO;
        drop_queue(t);
        pthread_mutex_unlock(&t->mu);
        goto done;
    }
    for (;;) {
        log_news(t, jfd);
        pthread_mutex_lock(&t->mu);
        while (t->len == 0 && !t->eof && t->nnotes == 0) {
            t->writer_idle = 1;
            pthread_cond_wait(&t->cv, &t->mu);
            t->writer_idle = 0;
            t->progress_ms = now_ms();     /* idle is not stuck: the clock starts now */
        }
        if (t->len == 0 && t->eof)
            break;
        /* The forwarder only appends past c->len: [off, len) is ours to write unlocked. */
        struct chunk *c = t->qhead;
        size_t n = c->len - c->off;
        const char *p = c->data + c->off;
        pthread_mutex_unlock(&t->mu);
        if (n && write_all(log, p, n) != 0) {
            int e = errno;
            tap_log(jfd, &t->id, 1, "tap: task log write failed after %llu bytes: %s; logging "
                    "stopped, output still forwarded", t->put, strerror(e));
            pthread_mutex_lock(&t->mu);
            t->writer_dead = 1;
            t->log_errno = e ? e : EIO;
            drop_queue(t);
            break;
        }
        pthread_mutex_lock(&t->mu);
        c->off += n;
        t->len -= n;
        if (t->len == 0 && t->eof)
            wake_forwarder(t);     /* an answer may be waiting for the last bytes */
        if (c->off == c->len) {
            if (c == t->qtail) {
                c->off = c->len = 0;       /* the forwarder fills it again from the start */
            } else {
                t->qhead = c->next;
                /* A few spares spare the allocator; the rest goes back. */
                int nspare = 0;
                for (struct chunk *x = t->spare; x && nspare < 4; x = x->next)
                    nspare++;
                if (nspare < 4) {
                    c->next = t->spare;
                    t->spare = c;
                } else {
                    free(c);
                }
            }
        }
        t->progress_ms = now_ms();
        pthread_mutex_unlock(&t->mu);
    }
    /* Never hold mu during spool I/O: the forwarder would wait on a hung mount. */
    unsigned long long ngaps = t->ngaps, gap_bytes = t->gap_bytes;
    pthread_mutex_unlock(&t->mu);
    log_news(t, jfd);
    if (ngaps > MAX_GAPS)
        tap_log(jfd, &t->id, 1, "gaps: %llu in all, %llu bytes not logged", ngaps, gap_bytes);
    if (t->stats) {
        /* bytes[] are the forwarder's, final by now: eof was set after its last read. */
        struct rusage ru;
        if (t->threaded) {
            /* The host's other copiers are in RUSAGE_SELF too: this copier's two threads. */
            getrusage(RUSAGE_THREAD, &ru);
            ru.ru_utime.tv_sec += t->fwd_ru.ru_utime.tv_sec;
            ru.ru_utime.tv_usec += t->fwd_ru.ru_utime.tv_usec;
            ru.ru_stime.tv_sec += t->fwd_ru.ru_stime.tv_sec;
            ru.ru_stime.tv_usec += t->fwd_ru.ru_stime.tv_usec;
            for (struct timeval *tv = &ru.ru_utime; tv; tv = tv == &ru.ru_utime ? &ru.ru_stime
                                                                              : NULL)
                if (tv->tv_usec >= 1000000) {
                    tv->tv_sec++;
                    tv->tv_usec -= 1000000;
                }
        } else {
            getrusage(RUSAGE_SELF, &ru);
        }
        tap_log(jfd, &t->id, 1, "stats: bytes_out=%llu bytes_err=%llu user_s=%ld.%06ld "
                "sys_s=%ld.%06ld gaps=%llu gap_bytes=%llu", t->bytes[0], t->bytes[1],
                (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec, (long)ru.ru_stime.tv_sec,
                (long)ru.ru_stime.tv_usec, ngaps, gap_bytes);
    }
done:
    /* The log is whole once task_exit has its answer (every byte written); its close and the
     * exit record follow it in the spool. */
    if (log >= 0)
        close(log);
    pthread_mutex_lock(&t->mu);
    t->log_closed = 1;
    pthread_mutex_unlock(&t->mu);
    wake_forwarder(t);
    /* task_exit sends the record once it has the answer; the forwarder says when none will
     * come. Written here, as the user: root writes nothing in the user's directory. */
    pthread_mutex_lock(&t->mu);
    while (t->rec_state == REC_AWAITED)
        pthread_cond_wait(&t->cv, &t->mu);
    int have_record = t->rec_state == REC_READY;
    pthread_mutex_unlock(&t->mu);
    if (have_record && jfd >= 0)
        write_exit_record(jfd, &t->id, t->handoff.rec, t->handoff.rec_len);
    if (jfd >= 0)
        close(jfd);
    pthread_mutex_lock(&t->mu);
    t->writer_done = 1;
    pthread_mutex_unlock(&t->mu);
    wake_forwarder(t);
    tap_release(t);
    return NULL;
}

/* ---------------------------------------------------------------- forwarding */

/*
 * Copies from pipe i: one read (so stdout and stderr take turns, keeping the log close to
 * arrival order), or until the pipe is empty when to_empty is set. Returns 0 at EOF, else 1.
 */
static int pump(struct tap *t, int i, char *buf, int to_empty)
{
    for (;;) {
        ssize_t n = read(t->in[i], buf, COPY_BUF);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 1;
            char note[160];
            snprintf(note, sizeof(note), "copier: read from std%s failed: %s",
                     i ? "err" : "out", strerror(errno));
            add_note(t, note);
            return 0;
        }
        unsigned long long off = t->bytes[0] + t->bytes[1];
        t->bytes[i] += (unsigned long long)n;
        /* Slurm's destination first: it must never lose bytes because the log is slow. */
        int fwd_errno = write_all(t->orig[i], buf, (size_t)n) != 0 ? errno : 0;
        log_output(t, buf, (size_t)n, off);
        if (fwd_errno) {
            /* As without the tap, the task's next write must fail (EPIPE, e.g.
             * `srun yes | head`): close our end of its pipe, the caller treats it as EOF. */
            if (fwd_errno != EPIPE) {
                char note[160];
                snprintf(note, sizeof(note), "copier: writing to the original std%s failed: "
                         "%s; closing the task's std%s", i ? "err" : "out",
                         strerror(fwd_errno), i ? "err" : "out");
                add_note(t, note);
            }
            return 0;
        }
        if (!to_empty)
            return 1;
    }
}

/* Answers task_exit: what was logged, once nothing is pending (or now, if final,
 * or if the writer is stuck on a hung spool: then task_exit need not wait out its whole
 * bound). */
static void answer(struct tap *t, int final)
{
    pthread_mutex_lock(&t->mu);
    size_t pending = t->writer_dead ? 0 : t->len;
    if (pending && !t->writer_idle && now_ms() - t->progress_ms > STUCK_MS)
        final = 1;
    struct handoff_report dr = {.flushed = pending == 0, .bytes = t->bytes[0] + t->bytes[1],
                              .gaps = t->ngaps, .gap_bytes = t->gap_bytes,
                              .first_gap = t->first_gap, .log_errno = t->log_errno};
    pthread_mutex_unlock(&t->mu);
    if (pending && !final)
        return;
    handoff_answer(&t->handoff, &dr);
    if (t->handoff.rec_fd >= 0 && t->answered_at < 0)
        t->answered_at = now_ms();
}

/* What task_exit sent back after its answer: handed to the writer, or given up on. */
static void take_record(struct tap *t)
{
    if (t->handoff.rec_fd < 0)
        return;
    int r = handoff_take_record(&t->handoff);
    if (r != 0)
        record_is(t, r > 0 ? REC_READY : REC_NONE);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

static void run_copier(struct tap *t)
{
    char *buf = t->buf;
    int open_in = 2, task_done = 0;
    pthread_t writer;
    pthread_attr_t attr;

    for (int i = 0; i < 2; i++)
        fcntl(t->in[i], F_SETFL, fcntl(t->in[i], F_GETFL) | O_NONBLOCK);
    t->progress_ms = now_ms();
    /* Small stacks: a host runs two threads per local task (the writer needs a few KiB). */
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (t->threaded)
        t->refs = 2;               /* set before the writer may release */
    if (pthread_create(&writer, &attr, writer_main, t) != 0) {
        t->writer_dead = 1;        /* forward only */
        t->writer_done = 1;
        t->rec_state = REC_NONE;
        t->refs = 1;
    }
    pthread_attr_destroy(&attr);

    while (open_in > 0) {
        struct pollfd pfd[5];
        int idx[5], n = 0;
        for (int i = 0; i < 2; i++)
            if (t->in[i] >= 0) {
                pfd[n] = (struct pollfd){t->in[i], POLLIN, 0};
                idx[n++] = i;
            }
        if (t->pidfd >= 0) {
            pfd[n] = (struct pollfd){t->pidfd, POLLIN, 0};
            idx[n++] = 2;
        }
        if (t->handoff.lsock >= 0) {
            pfd[n] = (struct pollfd){t->handoff.lsock, POLLIN, 0};
            idx[n++] = 3;
        }
        if (t->handoff.rec_fd >= 0) {
            pfd[n] = (struct pollfd){t->handoff.rec_fd, POLLIN, 0};
            idx[n++] = 4;
        }
        /* Waiting for the log to catch up before answering task_exit: look again soon. */
        int timeout = task_done && t->handoff.nconns ? 2 : -1;
        if (poll(pfd, (nfds_t)n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int small = 1;
        for (int k = 0; k < n; k++) {
            if (!pfd[k].revents)
                continue;
            int i = idx[k];
            if (i < 2 && t->in[i] >= 0) {
                int avail = 0;
                if (ioctl(t->in[i], FIONREAD, &avail) == 0 && avail >= COPY_BUF / 2)
                    small = 0;
            }
            if (i == 3) {
                handoff_accept(&t->handoff);
            } else if (i == 4) {
                take_record(t);
            } else if (i == 2) {
                /* The task has exited: forward what it wrote, then task_exit may go on.
                 * Children it left behind may still write; we keep copying that. */
                for (int j = 0; j < 2; j++)
                    if (t->in[j] >= 0 && !pump(t, j, buf, 1)) {
                        close(t->in[j]);
                        t->in[j] = -1;
                        open_in--;
                    }
                flush_tail(t);
                task_done = 1;
                close(t->pidfd);
                t->pidfd = -1;
            } else if (t->in[i] >= 0 && !pump(t, i, buf, 0)) {
                close(t->in[i]);
                t->in[i] = -1;
                open_in--;
            }
        }
        /* Pipes still open (the task's children hold them): answer once its bytes are logged.
         * At EOF the answer waits for the log to be closed too (below). */
        if (task_done && t->handoff.nconns && open_in > 0)
            answer(t, 0);
        /* Trickling output (pipes far from full) while the task runs: let it gather for
         * 0.3 ms so each wake-up copies more (about 3x less CPU per GiB through srun); a full
         * pipe is never made to wait, and the flush at exit (or at EOF) never naps. */
        if (small && t->pidfd >= 0 && open_in > 0) {
            struct timespec nap = {0, 300000};
            nanosleep(&nap, NULL);
        }
    }
    flush_tail(t);
    /* Everything is forwarded: Slurm's side sees EOF now, not when the log has caught up. */
    for (int i = 0; i < 2; i++)
        if (t->orig[i] >= 0) {
            close(t->orig[i]);
            t->orig[i] = -1;
        }
    if (t->threaded && t->stats)
        getrusage(RUSAGE_THREAD, &t->fwd_ru);
    pthread_mutex_lock(&t->mu);
    t->eof = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);

    /* The task is gone. Wait (bounded) for the log to catch up, for task_exit to ask, and for
     * the exit record it sends back once answered. */
    long start = now_ms(), asked_at = t->answered_at;
    long flush_ms = t->hosted ? HOSTED_FLUSH_MS : FINAL_FLUSH_MS;
    for (;;) {
        handoff_accept(&t->handoff);
        take_record(t);
        pthread_mutex_lock(&t->mu);
        int done = t->writer_done, closed = t->log_closed;
        pthread_mutex_unlock(&t->mu);
        if (t->handoff.nconns) {
            /* Once every byte is written (or the writer is stuck on a hung spool: answer()
             * says so at once). The log's close is not waited for: it is one more wake-up
             * on each task_exit, which run one after another (issue 20). */
            answer(t, closed || now_ms() - start > flush_ms);
            if (!t->handoff.nconns && asked_at < 0)
                asked_at = now_ms();
        }
        /* No record will come: root did not ask in time, or sent none once answered (a
         * closed connection says so at once: take_record). */
        if ((t->answered_at < 0 && now_ms() - start > LINGER_MS) ||
            (t->answered_at >= 0 && now_ms() - t->answered_at > RECORD_WAIT_MS))
            record_is(t, REC_NONE);
        if (done && (asked_at >= 0 || now_ms() - start > LINGER_MS))
            break;
        if (now_ms() - start > flush_ms + LINGER_MS)
            break;
        /* Woken by what it waits for: an ask, the record, the writer's word (eventfd). The
         * timeout only serves the bounds above; an answer held for the log's close, or a
         * copier without the eventfd, looks again soon. */
        struct pollfd pfd[3] = {{t->handoff.lsock, POLLIN, 0}, {t->handoff.rec_fd, POLLIN, 0},
                                {t->wake, POLLIN, 0}};
        uint64_t woken;
        int timeout = t->handoff.nconns || t->wake < 0 ? 5 : 100;
        if (poll(pfd, 3, timeout) > 0 && (pfd[2].revents & POLLIN) &&
            read(t->wake, &woken, sizeof(woken)) < 0) {
            /* nothing pending after all */
        }
    }
    /* Leaving: a writer still waiting for the record waits no more. */
    record_is(t, REC_NONE);
}

/* ---------------------------------------------------------------- setting it up */

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

/* The copier's state from the task's fds and what the task said of itself. */
static void tap_init(struct tap *t, int fds[CF_N], const struct copier_spec *spec,
                     const struct plugin_config *cfg)
{
    t->in[0] = fds[CF_OUT];
    t->in[1] = fds[CF_ERR];
    t->orig[0] = fds[CF_ORIG_OUT];
    t->orig[1] = fds[CF_ORIG_ERR];
    t->pidfd = fds[CF_PIDFD];
    t->handoff.lsock = fds[CF_LSOCK];
    t->cfg = cfg;
    t->stats = spec->stats;
    t->hosted = spec->hosted;
    t->id = spec->id;
    t->task_pid = spec->task_pid;
    t->start_time = time(NULL);
    t->cap = cfg->ring_bytes;
    t->head_max = spec->id.step == SLURM_BATCH_SCRIPT ? cfg->batch_log_max : 0;
    t->handoff.rec_fd = -1;
    t->answered_at = -1;
    t->rec_state = REC_AWAITED;
    t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
}

static void say_running(int ack)
{
    if (ack >= 0) {
        if (write(ack, "1", 1) != 1) {
            /* the task gave up waiting and runs untapped: nothing reaches us but EOF */
        }
        close(ack);
    }
}

/* The copier process (no host: the task's grandchild): keeps only its fds, says it runs
 * (ack >= 0), and copies until the task's output ends. */
void copier_run(int fds[CF_N], int ack, const struct copier_spec *spec,
                const struct plugin_config *cfg)
{
    static char buf[COPY_BUF];
    static struct tap t;
    signal(SIGCHLD, SIG_DFL);
    int keep[CF_N + 1];
    for (int i = 0; i < CF_N; i++)
        keep[i] = fds[i];
    keep[CF_N] = ack;
    close_all_but(keep, CF_N + 1);
    tap_init(&t, fds, spec, cfg);
    t.buf = buf;
    say_running(ack);
    run_copier(&t);
    _exit(0);
}

static void *forwarder_main(void *arg)
{
    struct tap *t = arg;
    run_copier(t);
    tap_release(t);                /* the writer, if still at work, frees it after us */
    return NULL;
}

int copier_start_thread(int fds[CF_N], int ack, const struct copier_spec *spec,
                        const struct plugin_config *cfg)
{
    struct tap *t = calloc(1, sizeof(*t));
    char *buf = malloc(COPY_BUF);
    if (!t || !buf) {
        free(t);
        free(buf);
        return -1;
    }
    tap_init(t, fds, spec, cfg);
    t->buf = buf;
    t->threaded = 1;
    t->refs = 1;
    live_add(1);
    pthread_attr_t attr;
    pthread_t th;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, forwarder_main, t);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        /* The caller closes the task's fds (the task then starts its own copier): only what
         * tap_init made is ours to let go. */
        if (t->wake >= 0)
            close(t->wake);
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(buf);
        free(t);
        live_add(-1);
        return -1;
    }
    /* A thread made is a copier that will read the pipes: the task need not wait for it to
     * be scheduled (one wake-up less on every task's start). */
    say_running(ack);
    return 0;
}
