/* A native "trainer" that prints progress then crashes in the chosen way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int crash_null(const char *), crash_stack(const char *), crash_double_free(const char *),
    crash_ill(const char *), crash_bus(const char *);
int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "null", *dir = argc > 2 ? argv[2] : "/tmp";
    int steps = argc > 3 ? atoi(argv[3]) : 5;
    for (int i = 1; i <= steps; i++) printf("[native] iteration %d residual %.6f\n", i, 1.0 / i);
    fflush(stdout);
    if (!strcmp(how, "stack")) return crash_stack(dir);
    if (!strcmp(how, "double_free")) return crash_double_free(dir);
    if (!strcmp(how, "ill")) return crash_ill(dir);
    if (!strcmp(how, "bus")) return crash_bus(dir);
    return crash_null(dir);
}
