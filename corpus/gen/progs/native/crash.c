/* The one native crasher of the corpus sets. Every mode does ordinary-looking work, then fails
 * for real (SIGSEGV, SIGBUS, SIGILL, SIGFPE, abort, an errno, a silent exit).
 *  - crash_* functions: loaded with ctypes from libcrash.so, or called by crashprog.c;
 *  - `crash MODE`: the held-out sets' modes (block progress lines: null, assert, bus, ill, fpe,
 *    silent-exit, spin, loop, enoent, eacces, enospc, mallocnull; solver progress lines:
 *    solver-null, solver-stack, solver-abort, solver-fopen, solver-malloc, solver-exit42).
 * Build the library without main: -DCRASH_NO_MAIN. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int crash_null(const char *dir) { (void)dir; volatile int *p = NULL; return *p; }

static int deep(int n) { volatile char pad[4096]; pad[0] = (char)n; return deep(n + 1) + pad[0]; }
int crash_stack(const char *dir) { (void)dir; return deep(0); }

int crash_double_free(const char *dir) {
    (void)dir;
    char *p = malloc(64);
    strcpy(p, "batch");
    free(p);
    free(p);
    return 0;
}

int crash_ill(const char *dir) { (void)dir; __builtin_trap(); }

int crash_bus(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/mapped-%d.bin", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (ftruncate(fd, 4096) != 0) return 1;
    volatile char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unlink(path);
    return m[8192]; /* past the end of the file: SIGBUS */
}

#ifndef CRASH_NO_MAIN
struct rec { int n; float *vals; };

static void progress(const char *what, int k) {
    for (int i = 0; i < k; i++) {
        printf("[%s] processed block %d/%d\n", what, i + 1, 40);
        fflush(stdout);
        usleep(20000);
    }
}

static int count_tokens(const struct rec *r) { assert(r->n > 0); return r->n; }

static int depth(int n) { volatile char pad[4096]; pad[0] = (char)n; return depth(n + 1) + pad[0]; }

/* holdout's solver: three iterations of progress, then the mode's failure */
static int solver(const char *mode) {
    for (int i = 0; i < 3; i++) printf("solver: iteration %d residual %.3e\n", i, 1.0 / (i + 1));
    fflush(stdout);
    if (!strcmp(mode, "null")) { int *p = NULL; p[7] = 1; }
    else if (!strcmp(mode, "stack")) return depth(0);
    else if (!strcmp(mode, "abort")) { fprintf(stderr, "mesh.c:88: invariant broken, aborting\n"); abort(); }
    else if (!strcmp(mode, "fopen")) {
        FILE *f = fopen("/scratch/mesh/input_0042.vtk", "r");
        if (!f) { perror("fopen /scratch/mesh/input_0042.vtk"); return 2; }
    } else if (!strcmp(mode, "malloc")) {
        size_t n = (size_t)64 << 30;
        void *p = malloc(n);
        if (!p) { perror("malloc(64 GiB) for the halo buffer"); return 12; }
        memset(p, 1, n);
    } else if (!strcmp(mode, "exit42")) { printf("converged? no\n"); return 42; }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "null";
    volatile int zero = 0;
    if (!strncmp(mode, "solver-", 7)) return solver(mode + 7);
    if (!strcmp(mode, "null")) {
        struct rec *table[8] = {0};
        progress("augment", 12);
        for (int i = 0; i < 8; i++) table[i] = (i == 5) ? NULL : calloc(1, sizeof(struct rec));
        float s = 0;
        for (int i = 0; i < 8; i++) s += table[i]->vals == NULL ? (float)table[i]->n : 1.0f;
        printf("%f\n", s);
    } else if (!strcmp(mode, "assert")) {
        struct rec r = {0, NULL};
        progress("tokenize", 7);
        printf("%d\n", count_tokens(&r));
    } else if (!strcmp(mode, "bus")) {
        const char *p = argc > 2 ? argv[2] : "shard.bin";
        int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (ftruncate(fd, 1 << 20)) return 2;
        char *m = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
        progress("mmap-reader", 5);
        if (ftruncate(fd, 4096)) return 2;  /* another writer shrinks the shard under us */
        long sum = 0;
        for (int i = 0; i < (1 << 20); i += 4096) sum += m[i];
        printf("%ld\n", sum);
    } else if (!strcmp(mode, "ill")) {
        progress("simd-kernels", 3);
        printf("dispatching to avx512 path\n"); fflush(stdout);
        __builtin_trap();
    } else if (!strcmp(mode, "fpe")) {
        progress("histogram", 9);
        int bins = zero;
        printf("%d\n", 1000 / bins);
    } else if (!strcmp(mode, "silent-exit")) {
        progress("export", 20);
        return 3;
    } else if (!strcmp(mode, "spin")) {
        progress("solver", 6);
        volatile unsigned long x = 0;
        for (;;) x++;
    } else if (!strcmp(mode, "loop")) {
        for (int i = 0;; i++) { printf("timestep %d residual %.3e\n", i, 1.0 / (i + 1)); fflush(stdout); usleep(200000); }
    } else if (!strcmp(mode, "enoent")) {
        const char *p = argc > 2 ? argv[2] : "vocab.txt";
        progress("init", 2);
        FILE *f = fopen(p, "r");
        if (!f) { fprintf(stderr, "fatal: could not open vocabulary '%s': ", p); perror(NULL); return 1; }
    } else if (!strcmp(mode, "eacces")) {
        const char *p = argv[2];
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { perror(p); return 1; }
    } else if (!strcmp(mode, "enospc")) {
        char path[4096]; snprintf(path, sizeof path, "%s/frames.raw", argv[2]);
        FILE *f = fopen(path, "wb");
        static char buf[65536];
        memset(buf, 7, sizeof buf);
        for (int i = 0; i < 64; i++) {
            if (fwrite(buf, 1, sizeof buf, f) != sizeof buf || fflush(f)) {
                fprintf(stderr, "render: write of frame %d to %s failed: %s\n", i, path, strerror(errno));
                return 1;
            }
            printf("frame %d written\n", i); fflush(stdout);
        }
        fclose(f);
    } else if (!strcmp(mode, "mallocnull")) {
        progress("alloc-arena", 2);
        size_t want = (size_t)64 << 30;
        void *p = malloc(want);
        if (!p) { fprintf(stderr, "arena: malloc(%zu) failed: %s\n", want, strerror(errno)); return 1; }
    }
    return 0;
}
#endif
