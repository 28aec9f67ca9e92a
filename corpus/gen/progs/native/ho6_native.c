/* Held-out set 6's C program: `ho6_native MODE [ARG]`.
 * trap: an unreachable branch compiled to ud2 (SIGILL); fill PATH: a feature dump written with
 * fwrite and checked at fclose (ENOSPC); quiet CODE: a solver that prints progress and leaves
 * with CODE; mpi MODE RANK: a task under mpirun (OMPI_COMM_WORLD_RANK) where rank RANK
 * segfaults (segv), exits 3 quietly (quiet), or waits forever for a peer that never sends
 * (recv); ok: every rank finishes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int decode_op(int op) {
    switch (op) {
    case 0: return 1;
    case 1: return 2;
    default: __builtin_trap(); /* "cannot happen": the opcode table was corrupted */
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(mode, "trap")) {
        int ops[] = {0, 1, 1, 0, 7};
        for (int i = 0; i < 5; i++) printf("decoded op %d -> %d\n", i, decode_op(ops[i]));
        return 0;
    }
    if (!strcmp(mode, "fill")) {
        FILE *f = fopen(argv[2], "wb");
        if (!f) { perror(argv[2]); return 2; }
        static char buf[1 << 16];
        memset(buf, 0x5a, sizeof buf);
        for (int i = 0; i < 64; i++) {
            if (fwrite(buf, 1, sizeof buf, f) != sizeof buf) {
                fprintf(stderr, "featdump: write to %s failed: %s\n", argv[2], strerror(errno));
                return 1;
            }
            printf("featdump: block %d written\n", i);
        }
        if (fclose(f) != 0) {
            fprintf(stderr, "featdump: closing %s: %s\n", argv[2], strerror(errno));
            return 1;
        }
        return 0;
    }
    if (!strcmp(mode, "quiet")) {
        for (int it = 0; it <= 500; it += 100) printf("solver iteration %d residual %.3e\n", it, 1.0 / (it + 1));
        return atoi(argv[2]);
    }
    if (!strcmp(mode, "mpi")) {
        const char *sub = argv[2];
        int bad = atoi(argv[3]);
        const char *r = getenv("OMPI_COMM_WORLD_RANK");
        int rank = r ? atoi(r) : 0;
        for (int step = 0; step < 4; step++) {
            printf("[rank %d] sweep %d energy %.6f\n", rank, step, -1.0 - step * 0.01 - rank * 0.001);
            sleep(1);
            if (rank == bad && step == 2) {
                if (!strcmp(sub, "segv")) { volatile int *p = NULL; *p = 1; }
                if (!strcmp(sub, "quiet")) return 3;
                if (!strcmp(sub, "recv")) { printf("[rank %d] waiting for halo from rank %d\n", rank, 1 - rank); pause(); }
            }
        }
        printf("[rank %d] done\n", rank);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 64;
}
