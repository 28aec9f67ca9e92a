/* Real native crashes, loaded with ctypes or linked into crashprog: each function dies the way
   a buggy extension does (SIGSEGV, SIGBUS, SIGILL, glibc's abort on heap corruption). */
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
