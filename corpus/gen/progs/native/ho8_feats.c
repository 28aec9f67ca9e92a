/* libfeats.so for ho8_native feats; ho8_op.c declares a symbol nobody defines. */
#include <math.h>
double feats_norm(const double *x, int n) { double s = 0; for (int i = 0; i < n; i++) s += x[i] * x[i]; return sqrt(s); }
