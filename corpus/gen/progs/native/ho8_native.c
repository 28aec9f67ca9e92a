/* Held-out set 8's C jobs: `ho8_native MODE [ARG]`.
 * mpi_sigbus R: every MPI-style rank (OMPI_COMM_WORLD_RANK / SLURM_PROCID) maps its shard file
 *   {ARG}.<rank>; rank R's shard was truncated after it was mapped, so it dies of SIGBUS.
 * feats: calls into libfeats.so (linked at build time; the case removes it before running).
 * The undefined-symbol library (ho8_op.c) is built separately with -shared. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int rank(void) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("SLURM_PROCID");
    return r ? atoi(r) : 0;
}

static int mpi_sigbus(const char *base, int bad) {
    int me = rank();
    char path[512];
    snprintf(path, sizeof path, "%s.%d", base, me);
    size_t len = 1 << 22;
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, len) != 0) { perror(path); return 2; }
    unsigned char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 2; }
    printf("rank %d: mapped shard %s (%zu bytes)\n", me, path, len);
    fflush(stdout);
    sleep(1);
    if (me == bad && ftruncate(fd, 4096) != 0) { perror("ftruncate"); return 2; }
    unsigned long sum = 0;
    for (size_t i = 0; i < len; i += 4096) sum += p[i];
    printf("rank %d: checksum %lu\n", me, sum);
    return 0;
}

#ifdef WITH_FEATS
extern double feats_norm(const double *x, int n);
#endif

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "mpi_sigbus")) return mpi_sigbus(argc > 2 ? argv[2] : "/tmp/shard", argc > 3 ? atoi(argv[3]) : 1);
#ifdef WITH_FEATS
    if (!strcmp(mode, "feats")) { double x[3] = {1, 2, 3}; printf("%f\n", feats_norm(x, 3)); return 0; }
#endif
    fprintf(stderr, "unknown mode %s\n", mode);
    return 64;
}
