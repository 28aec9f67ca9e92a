/* An extension module whose init calls a symbol no library provides: importing it fails with
   "undefined symbol", as a wheel built against another torch/CUDA build does. */
extern void *fused_adam_step_v2(void);
void *PyInit_fused_ops(void) { return fused_adam_step_v2(); }
