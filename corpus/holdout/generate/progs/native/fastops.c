/* A Python extension calling a function no library provides: import fails with "undefined symbol". */
#include <Python.h>
extern double fastops_simd_dot(const double *, const double *, long);
static PyObject *dot(PyObject *self, PyObject *args) {
    double a[2] = {1, 2};
    return PyFloat_FromDouble(fastops_simd_dot(a, a, 2));
}
static PyMethodDef M[] = {{"dot", dot, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "fastops", NULL, -1, M};
PyMODINIT_FUNC PyInit_fastops(void) { return PyModule_Create(&D); }
