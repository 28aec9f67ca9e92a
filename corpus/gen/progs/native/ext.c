/* A native extension built against a runtime that no longer exports what it calls: loading it
 * fails with "undefined symbol: MISSING", as a wheel built for another torch/CUDA build does.
 * -DMISSING=name picks the absent symbol; -DPYMOD=name makes it a Python extension module
 * (imported: ImportError), otherwise it is a plain library (ctypes.CDLL: OSError). */
#ifndef MISSING
#define MISSING adam_kernel_v2
#endif
extern void *MISSING(void);
#ifdef PYMOD
#include <Python.h>
#define CAT(a, b) a##b
#define INIT(m) CAT(PyInit_, m)
#define STR2(x) #x
#define STR(x) STR2(x)
static PyObject *call(PyObject *self, PyObject *args) { MISSING(); Py_RETURN_NONE; }
static PyMethodDef M[] = {{"call", call, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, STR(PYMOD), NULL, -1, M};
PyMODINIT_FUNC INIT(PYMOD)(void) { return PyModule_Create(&D); }
#else
void *fused_step(void) { return MISSING(); }
#endif
