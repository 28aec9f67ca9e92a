// Uncaught C++ exceptions (std::runtime_error, std::bad_alloc) end in std::terminate -> abort.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    std::string mode = argc > 1 ? argv[1] : "runtime";
    std::printf("loading graph with %d partitions\n", 8);
    std::fflush(stdout);
    if (mode == "runtime") throw std::runtime_error("partition 3: inconsistent edge count");
    std::vector<std::vector<double>> blocks;
    for (;;) blocks.emplace_back(std::size_t(1) << 27);  // 1 GiB each, under RLIMIT_AS
}
