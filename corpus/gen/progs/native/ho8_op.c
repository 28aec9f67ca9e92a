/* A custom-op library built against a newer core library: it references a symbol the
 * loaded core does not define, so dlopen (ctypes.CDLL) fails with "undefined symbol". */
extern int fused_rope_fwd_v2(const float *q, float *out, int n);
int op_rope(const float *q, float *out, int n) { return fused_rope_fwd_v2(q, out, n); }
