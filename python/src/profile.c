/* SPDX-License-Identifier: MIT */
/* pinstage.Profile: a machine profile (which route, chunk size and thread
 * count each direction and size class takes), a value like the C one. */
#include "pinstage_py.h"

static PyObject *wrap(pinstage_profile *p) {
    PsPy_Profile *self = PyObject_New(PsPy_Profile, &PsPy_ProfileType);
    if (!self) {
        pinstage_profile_free(p);
        return NULL;
    }
    self->profile = p;
    return (PyObject *)self;
}

static void Profile_dealloc(PsPy_Profile *self) {
    pinstage_profile_free(self->profile);
    PyObject_Free(self);
}

static PyObject *Profile_builtin(PyObject *cls, PyObject *unused) {
    (void)cls, (void)unused;
    pinstage_profile *p;
    pinstage_status s = pinstage_profile_builtin(&p);
    return s ? pspy_raise(s) : wrap(p);
}

static PyObject *Profile_calibrate(PyObject *cls, PyObject *args, PyObject *kwargs) {
    (void)cls;
    static char *names[] = {"thorough", NULL};
    int thorough = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:calibrate", names, &thorough)) return NULL;
    if (pspy_context(-1) < 0) return NULL;
    pinstage_profile *p = NULL;
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_profile_calibrate(&p, thorough);
    Py_END_ALLOW_THREADS
    return s ? pspy_raise(s) : wrap(p);
}

static PyObject *Profile_load(PyObject *cls, PyObject *arg) {
    (void)cls;
    PyObject *path;
    if (!PyUnicode_FSConverter(arg, &path)) return NULL;
    if (pspy_context(-1) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    pinstage_profile *p = NULL;
    pinstage_status s = pinstage_profile_load(&p, PyBytes_AS_STRING(path));
    Py_DECREF(path);
    return s ? pspy_raise(s) : wrap(p);
}

static PyObject *Profile_fixed(PyObject *cls, PyObject *args, PyObject *kwargs) {
    (void)cls;
    static char *names[] = {"route", "chunk", "threads", NULL};
    int route;
    Py_ssize_t chunk = 0;
    unsigned threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|nI:fixed", names, &route, &chunk, &threads)) return NULL;
    if (chunk < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk must be 0 (the whole transfer) or more bytes");
        return NULL;
    }
    pinstage_profile *p;
    pinstage_status s = pinstage_profile_fixed(&p, route, (size_t)chunk, threads);
    return s ? pspy_raise(s) : wrap(p);
}

static PyObject *Profile_save(PsPy_Profile *self, PyObject *arg) {
    PyObject *path;
    if (!PyUnicode_FSConverter(arg, &path)) return NULL;
    pinstage_status s = pinstage_profile_save(self->profile, PyBytes_AS_STRING(path));
    Py_DECREF(path);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *Profile_plan(PsPy_Profile *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"direction", "nbytes", NULL};
    int dir;
    Py_ssize_t bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "in:plan", names, &dir, &bytes)) return NULL;
    if (bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must be positive");
        return NULL;
    }
    pinstage_plan plan;
    pinstage_status s = pinstage_profile_plan(self->profile, (pinstage_direction)dir, (size_t)bytes, &plan);
    if (s) return pspy_raise(s);
    return Py_BuildValue("(inI)", plan.route, (Py_ssize_t)plan.chunk, plan.threads);
}

static PyObject *Profile_str(PsPy_Profile *self) {
    size_t len = pinstage_profile_describe(self->profile, NULL, 0);
    char *text = PyMem_Malloc(len + 1);
    if (!text) return PyErr_NoMemory();
    pinstage_profile_describe(self->profile, text, len + 1);
    PyObject *r = PyUnicode_FromString(text);
    PyMem_Free(text);
    return r;
}

static PyMethodDef Profile_methods[] = {
    {"builtin", (PyCFunction)Profile_builtin, METH_NOARGS | METH_CLASS,
     "builtin() -> Profile\n--\n\nThe built-in profile, measured on an H200 machine."},
    {"calibrate", (PyCFunction)(void (*)(void))Profile_calibrate, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "calibrate(thorough=False) -> Profile\n--\n\nMeasures this machine and the current context's GPU (under a "
     "second; about a minute thorough). The GIL is released meanwhile."},
    {"load", (PyCFunction)Profile_load, METH_O | METH_CLASS,
     "load(path) -> Profile\n--\n\nReads a saved profile; refused (pinstage.Error) when damaged or measured on "
     "another GPU model or driver."},
    {"fixed", (PyCFunction)(void (*)(void))Profile_fixed, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "fixed(route, chunk=0, threads=0) -> Profile\n--\n\nOne plan at every size: route is ROUTE_PAGEABLE, "
     "ROUTE_STAGED or ROUTE_ENGINE."},
    {"save", (PyCFunction)Profile_save, METH_O, "save(path)\n--\n\nWrites the profile as text."},
    {"plan", (PyCFunction)(void (*)(void))Profile_plan, METH_VARARGS | METH_KEYWORDS,
     "plan(direction, nbytes) -> (route, chunk, threads)\n--\n\nThe plan a transfer of nbytes takes (H2D or D2H)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject PsPy_ProfileType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage.Profile",
    .tp_basicsize = sizeof(PsPy_Profile),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Profile_dealloc,
    .tp_str = (reprfunc)Profile_str,
    .tp_methods = Profile_methods,
    .tp_doc = "A machine profile: per direction and size class, the fastest route, chunk size and thread count. "
              "Made by Profile.builtin(), .calibrate(), .load(path) or .fixed(...); str() prints its table; "
              "pinstage.set_default_profile() makes it the process default, Buffer(profile=...) a buffer's own.",
};
