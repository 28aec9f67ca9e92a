// C++ crashers: std::bad_alloc under a memory limit and a double free.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "badalloc";
    if (!std::strcmp(mode, "badalloc")) {
        std::vector<std::vector<double>> graph;
        for (int i = 0;; i++) {
            graph.emplace_back(std::size_t(16) << 20, 1.0);
            if (i % 4 == 0) { std::printf("knn-graph: built %d adjacency blocks\n", i + 1); std::fflush(stdout); }
        }
    } else {
        char *buf = static_cast<char *>(std::malloc(64));
        for (int i = 0; i < 5; i++) { std::printf("decoder: frame %d ok\n", i); std::fflush(stdout); usleep(10000); }
        std::free(buf);
        std::printf("decoder: flushing\n"); std::fflush(stdout);
        std::free(buf);
    }
    return 0;
}
