// The corpus's C++ crashers: an uncaught std::bad_alloc under a memory limit (terminate ->
// abort), an uncaught std::runtime_error, a double free. `cxx MODE [ARG]`:
//   blocks [MB]     allocated-block progress, bad_alloc        (tuning corpus)
//   badalloc        knn-graph progress, bad_alloc              (holdout2)
//   doublefree      decoder frames, then free() twice          (holdout2)
//   graph-runtime   uncaught std::runtime_error                (holdout)
//   graph-alloc     1 GiB blocks until bad_alloc               (holdout)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

static int blocks(size_t mb) {
    std::vector<std::vector<char>> held;
    for (int i = 0;; i++) {
        held.emplace_back(mb << 20, 1);
        std::printf("allocated block %d (%zu MiB total)\n", i, (i + 1) * mb);
        std::fflush(stdout);
    }
}

static int graph(const std::string &mode) {
    std::printf("loading graph with %d partitions\n", 8);
    std::fflush(stdout);
    if (mode == "runtime") throw std::runtime_error("partition 3: inconsistent edge count");
    std::vector<std::vector<double>> parts;
    for (;;) parts.emplace_back(std::size_t(1) << 27);  // 1 GiB each, under RLIMIT_AS
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "badalloc";
    if (!std::strcmp(mode, "blocks")) return blocks(argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 256);
    if (!std::strncmp(mode, "graph-", 6)) return graph(mode + 6);
    if (!std::strcmp(mode, "badalloc")) {
        std::vector<std::vector<double>> knn;
        for (int i = 0;; i++) {
            knn.emplace_back(std::size_t(16) << 20, 1.0);
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
