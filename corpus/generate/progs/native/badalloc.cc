// Grows a buffer until operator new fails under the address-space limit: std::bad_alloc,
// uncaught, so the C++ runtime prints "terminate called ..." and aborts.
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char **argv) {
    size_t mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
    std::vector<std::vector<char>> held;
    for (int i = 0;; i++) {
        held.emplace_back(mb << 20, 1);
        std::printf("allocated block %d (%zu MiB total)\n", i, (i + 1) * mb);
        std::fflush(stdout);
    }
}
