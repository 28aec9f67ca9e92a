// Held-out set 5's native failures: `ho5_crash MODE`.
//   terminate: a std::vector::at() past the end, never caught (std::terminate, SIGABRT)
//   stack: unbounded recursion through a std::function (stack overflow, SIGSEGV)
//   loop: prints progress until a signal ends it
//   rank: like loop, but the task whose SLURM_PROCID equals $BAD_RANK hits `terminate` at step 6
// Built with -DFUSED_LIB it is instead a shared library whose init calls a symbol no library
// defines (loading it with RTLD_NOW fails: undefined symbol).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#ifdef FUSED_LIB
extern "C" int fused_rope_forward_v2(const float *, float *, int);
extern "C" int fused_init(void) { float a = 0, b = 0; return fused_rope_forward_v2(&a, &b, 1); }
#else
static float bucket_sum(const std::vector<float> &hist, size_t lo, size_t hi) {
    float s = 0;
    for (size_t i = lo; i <= hi; ++i) s += hist.at(i);  // hi is one past the last bucket
    return s;
}

static void progress(int rank, int step) {
    std::printf("[native r%d] step %d: %d items decoded\n", rank, step, 4096 * (step + 1));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "loop";
    const char *pid = std::getenv("SLURM_PROCID");
    const char *bad = std::getenv("BAD_RANK");
    int rank = pid ? std::atoi(pid) : 0;
    std::vector<float> hist(64, 1.0f);
    if (!std::strcmp(mode, "terminate")) {
        for (int s = 0; s < 3; ++s) progress(rank, s);
        std::printf("histogram mass: %.1f\n", bucket_sum(hist, 0, hist.size()));
        return 0;
    }
    if (!std::strcmp(mode, "stack")) {
        std::function<long(long)> depth = [&](long n) -> long {
            volatile char pad[256];
            pad[0] = static_cast<char>(n);
            return n == 0 ? pad[0] : 1 + depth(n - 1);
        };
        for (int s = 0; s < 3; ++s) progress(rank, s);
        std::printf("walking the parse tree\n");
        std::fflush(stdout);
        std::printf("depth %ld\n", depth(1L << 40));
        return 0;
    }
    for (int s = 0; s < 100000; ++s) {
        progress(rank, s);
        if (!std::strcmp(mode, "rank") && bad && rank == std::atoi(bad) && s == 6)
            std::printf("mass %.1f\n", bucket_sum(hist, 0, hist.size()));
    }
    return 0;
}
#endif
