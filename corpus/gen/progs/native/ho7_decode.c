/* Held-out set 7: a small frame decoder loaded with ctypes (its bug: no NULL check on the
 * header of a sample that has none), and a fused-op extension linked against a symbol the
 * installed library no longer exports (undefined symbol at import). */
#include <string.h>

int decode_frame(const char *hdr, int idx) {
    /* the header's 4th byte carries the codec version */
    return (int)strlen(hdr) * 64 + hdr[3] + idx;
}
