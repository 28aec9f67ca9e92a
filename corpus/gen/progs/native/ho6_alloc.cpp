// Held-out set 6: a C++ k-mer counter that grows a vector of buffers until new throws
// std::bad_alloc (RLIMIT_AS), never caught: terminate, SIGABRT.
#include <cstdio>
#include <memory>
#include <vector>

int main() {
    std::vector<std::unique_ptr<char[]>> tables;
    for (int i = 0;; i++) {
        tables.emplace_back(new char[256u << 20]);
        std::printf("kmer table %d allocated (%d MiB total)\n", i, (i + 1) * 256);
        std::fflush(stdout);
    }
}
