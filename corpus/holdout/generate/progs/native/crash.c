/* Native crashers for the held-out set: `crash MODE` prints progress, then fails for real. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int depth(int n) { volatile char pad[4096]; pad[0] = (char)n; return depth(n + 1) + pad[0]; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "null";
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
