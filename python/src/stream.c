/* SPDX-License-Identifier: MIT */
/* pinstage.Stream: a CUDA stream for programs with no framework stream to
 * hand. It speaks the stream protocols the module takes (cuda_stream,
 * __cuda_stream__), so PyTorch and CuPy code can use its handle too. */
#include <stdint.h>

#include "pinstage_py.h"

typedef struct {
    PyObject_HEAD
    CUstream stream;
    int device;
    int open;
} PsPy_Stream;

static int Stream_init(PsPy_Stream *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"non_blocking", "device", NULL};
    int non_blocking = 1, device = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pi:Stream", names, &non_blocking, &device)) return -1;
    if (self->open) {
        PyErr_SetString(PyExc_RuntimeError, "pinstage.Stream is already initialized");
        return -1;
    }
    if (pspy_context(device) < 0) return -1;
    self->device = pspy_current_device();
    pinstage_status s = pinstage_stream_create(&self->stream, non_blocking ? PINSTAGE_STREAM_NON_BLOCKING : 0);
    if (s) return pspy_raise(s), -1;
    self->open = 1;
    return 0;
}

static pinstage_status close_stream(PsPy_Stream *self) {
    if (!self->open) return PINSTAGE_SUCCESS;
    self->open = 0;
    if (pspy_context(self->device) < 0) PyErr_Clear();
    return pinstage_stream_destroy(self->stream);
}

static void Stream_dealloc(PsPy_Stream *self) {
    close_stream(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *closed(void) {
    PyErr_SetString(PyExc_ValueError, "the pinstage.Stream is closed");
    return NULL;
}

static PyObject *Stream_synchronize(PsPy_Stream *self, PyObject *unused) {
    (void)unused;
    if (!self->open) return closed();
    if (pspy_context(self->device) < 0) return NULL;
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_stream_synchronize(self->stream);
    Py_END_ALLOW_THREADS
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *Stream_close(PsPy_Stream *self, PyObject *unused) {
    (void)unused;
    pinstage_status s = close_stream(self);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *Stream_handle(PsPy_Stream *self, void *c) {
    (void)c;
    if (!self->open) return closed();
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->stream);
}

static PyObject *Stream_cuda_stream_protocol(PsPy_Stream *self, PyObject *unused) {
    (void)unused;
    if (!self->open) return closed();
    return Py_BuildValue("(iK)", 0, (unsigned long long)(uintptr_t)self->stream);
}

static PyObject *Stream_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *Stream_exit(PsPy_Stream *self, PyObject *args) {
    (void)args;
    PyObject *r = Stream_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyMethodDef Stream_methods[] = {
    {"synchronize", (PyCFunction)Stream_synchronize, METH_NOARGS,
     "synchronize()\n--\n\nWaits for the work queued on the stream (the GIL released)."},
    {"close", (PyCFunction)Stream_close, METH_NOARGS, "close()\n--\n\nDestroys the stream."},
    {"__cuda_stream__", (PyCFunction)Stream_cuda_stream_protocol, METH_NOARGS,
     "__cuda_stream__() -> (0, handle)\n--\n\nThe CUDA Python stream protocol."},
    {"__enter__", Stream_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Stream_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Stream_getset[] = {
    {"handle", (getter)Stream_handle, NULL, "The CUstream, as an int.", NULL},
    {"cuda_stream", (getter)Stream_handle, NULL, "The CUstream, as an int (as PyTorch names it).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PsPy_StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage.Stream",
    .tp_basicsize = sizeof(PsPy_Stream),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Stream_init,
    .tp_dealloc = (destructor)Stream_dealloc,
    .tp_methods = Stream_methods,
    .tp_getset = Stream_getset,
    .tp_doc = "Stream(non_blocking=True, device=-1)\n--\n\nA CUDA stream (cuStreamCreate) in the device's primary "
              "context; pass it as any call's stream. Destroyed by close(), `with`, or when the object goes.",
};
