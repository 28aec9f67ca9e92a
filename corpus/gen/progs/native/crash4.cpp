// Held-out set 4's native crashes: `crash4 MODE`. purevirt: a destructor chain calls a pure
// virtual method (the C++ runtime prints its message and aborts).
#include <cstdio>
#include <cstring>
#include <unistd.h>

struct Codec {
    Codec() {}
    virtual ~Codec() { flush(); }
    void flush() { encode_tail(); }
    virtual void encode_tail() = 0;
};
struct Opus : Codec {
    void encode_tail() override { std::printf("tail encoded\n"); }
};

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "purevirt";
    for (int i = 0; i < 4; i++) {
        std::printf("transcoding chunk %d/4\n", i + 1);
        std::fflush(stdout);
        usleep(20000);
    }
    if (!std::strcmp(mode, "purevirt")) {
        Codec *c = new Opus();
        delete c;  // ~Opus, then ~Codec calls flush() -> pure virtual
    }
    return 0;
}
