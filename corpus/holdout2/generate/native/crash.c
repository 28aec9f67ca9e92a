/* Native crashers for segfault cases: each mode fails the way a real bug in a data/sim
 * extension would, after some ordinary-looking progress output. */
#include <assert.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <errno.h>

struct rec { int n; float *vals; };

static void progress(const char *what, int k) {
    for (int i = 0; i < k; i++) {
        printf("[%s] processed block %d/%d\n", what, i + 1, 40);
        fflush(stdout);
        usleep(20000);
    }
}

static int count_tokens(const struct rec *r) { assert(r->n > 0); return r->n; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "null";
    volatile int zero = 0;
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
