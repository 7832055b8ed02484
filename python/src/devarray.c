/* SPDX-License-Identifier: MIT */
/* pinstage.DeviceArray: device memory of pinstage's own, for programs that
 * have no framework tensor to hand (and for the tests). It exposes
 * __cuda_array_interface__, so PyTorch, CuPy and Numba take it too. */
#include <string.h>

#include "pinstage_py.h"

typedef struct {
    const char *name, *alias, *typestr;
    char kind;
    size_t size;
} dtype_entry;

static const dtype_entry dtypes[] = {
    {"uint8", "u1", "|u1", 'u', 1},     {"int8", "i1", "|i1", 'i', 1},      {"bool", "b1", "|b1", 'b', 1},
    {"uint16", "u2", "<u2", 'u', 2},    {"int16", "i2", "<i2", 'i', 2},     {"float16", "f2", "<f2", 'f', 2},
    {"uint32", "u4", "<u4", 'u', 4},    {"int32", "i4", "<i4", 'i', 4},     {"float32", "f4", "<f4", 'f', 4},
    {"uint64", "u8", "<u8", 'u', 8},    {"int64", "i8", "<i8", 'i', 8},     {"float64", "f8", "<f8", 'f', 8},
    {"complex64", "c8", "<c8", 'c', 8}, {"complex128", "c16", "<c16", 'c', 16},
};

/* A dtype name ("float32", "f4", "<f4") or an object with `.str` (a NumPy dtype). */
static const dtype_entry *find_dtype(PyObject *dtype) {
    PyObject *text = NULL;
    if (PyUnicode_Check(dtype))
        text = Py_NewRef(dtype);
    else if (!(text = PyObject_GetAttrString(dtype, "str")) || !PyUnicode_Check(text))
        PyErr_Clear();
    const char *s = text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : NULL;
    const dtype_entry *found = NULL;
    for (size_t i = 0; s && i < sizeof dtypes / sizeof dtypes[0]; i++) {
        const char *bare = s[0] == '<' || s[0] == '|' || s[0] == '=' ? s + 1 : s;
        if (!strcmp(s, dtypes[i].name) || !strcmp(bare, dtypes[i].alias) || !strcmp(s, dtypes[i].typestr))
            found = &dtypes[i];
    }
    Py_XDECREF(text);
    if (!found)
        PyErr_Format(PyExc_ValueError, "dtype %R is not one DeviceArray knows (uint8, int8, bool, [u]int16/32/64, "
                                       "float16/32/64, complex64/128)",
                     dtype);
    return found;
}

static int DeviceArray_init(PsPy_DeviceArray *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"shape", "dtype", "device", NULL};
    PyObject *shape, *dtype = NULL;
    int device = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Oi:DeviceArray", names, &shape, &dtype, &device)) return -1;
    if (self->buf) {
        PyErr_SetString(PyExc_RuntimeError, "pinstage.DeviceArray is already initialized");
        return -1;
    }
    const dtype_entry *t = dtype ? find_dtype(dtype) : &dtypes[0];
    if (!t) return -1;
    PyObject *dims = PyLong_Check(shape) ? PyTuple_Pack(1, shape) : PySequence_Tuple(shape);
    if (!dims) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(dims);
    size_t count = 1;
    if (n > PSPY_MAX_DIMS) {
        Py_DECREF(dims);
        PyErr_Format(PyExc_ValueError, "shape has more than %d dimensions", PSPY_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t extent = PyLong_AsSsize_t(PyTuple_GET_ITEM(dims, i));
        if (extent < 0) {
            Py_DECREF(dims);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "shape: negative extent");
            return -1;
        }
        self->shape[i] = extent;
        count *= (size_t)extent;
    }
    Py_DECREF(dims);
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "a DeviceArray holds at least one element");
        return -1;
    }
    self->ndim = (int)n;
    self->itemsize = t->size;
    self->kind = t->kind;
    snprintf(self->typestr, sizeof self->typestr, "%s", t->typestr);
    if (pspy_context(device) < 0) return -1;
    self->device = pspy_current_device();
    size_t align = t->size <= 16 ? t->size : 16;
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_devbuf_alloc(&self->buf, count, t->size, align);
    Py_END_ALLOW_THREADS
    if (s) return pspy_raise(s), -1;
    return 0;
}

static pinstage_status free_array(PsPy_DeviceArray *self) {
    pinstage_devbuf *buf = self->buf;
    self->buf = NULL;
    if (!buf) return PINSTAGE_SUCCESS;
    if (pspy_context(self->device) < 0) PyErr_Clear();
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_devbuf_free(buf);
    Py_END_ALLOW_THREADS
    return s;
}

static void DeviceArray_dealloc(PsPy_DeviceArray *self) {
    free_array(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *closed(void) {
    PyErr_SetString(PyExc_ValueError, "the pinstage.DeviceArray is closed");
    return NULL;
}

int pspy_devarray_fill(PsPy_DeviceArray *a, pspy_device *d) {
    if (!a->buf) return closed(), -1;
    d->ptr = pinstage_devbuf_ptr(a->buf);
    d->itemsize = a->itemsize;
    d->kind = a->kind;
    d->device = a->device;
    d->ndim = a->ndim;
    memcpy(d->shape, a->shape, sizeof a->shape);
    d->keep = Py_NewRef((PyObject *)a);
    return 0;
}

static PyObject *DeviceArray_close(PsPy_DeviceArray *self, PyObject *unused) {
    (void)unused;
    pinstage_status s = free_array(self);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *DeviceArray_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *DeviceArray_exit(PsPy_DeviceArray *self, PyObject *args) {
    (void)args;
    PyObject *r = DeviceArray_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *shape_tuple(PsPy_DeviceArray *self) {
    PyObject *t = PyTuple_New(self->ndim);
    for (int i = 0; t && i < self->ndim; i++) {
        PyObject *x = PyLong_FromSsize_t(self->shape[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *DeviceArray_get_shape(PsPy_DeviceArray *self, void *c) {
    (void)c;
    return shape_tuple(self);
}

static PyObject *DeviceArray_get_dtype(PsPy_DeviceArray *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->typestr);
}

static PyObject *DeviceArray_get_itemsize(PsPy_DeviceArray *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(self->itemsize);
}

static PyObject *DeviceArray_get_nbytes(PsPy_DeviceArray *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(self->buf ? pinstage_devbuf_bytes(self->buf) : 0);
}

static PyObject *DeviceArray_get_ptr(PsPy_DeviceArray *self, void *c) {
    (void)c;
    if (!self->buf) return closed();
    return PyLong_FromUnsignedLongLong(pinstage_devbuf_ptr(self->buf));
}

static PyObject *DeviceArray_get_device(PsPy_DeviceArray *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->device);
}

static PyObject *DeviceArray_get_closed(PsPy_DeviceArray *self, void *c) {
    (void)c;
    return PyBool_FromLong(!self->buf);
}

static PyObject *DeviceArray_get_cai(PsPy_DeviceArray *self, void *c) {
    (void)c;
    if (!self->buf) {
        PyErr_SetString(PyExc_AttributeError, "a closed pinstage.DeviceArray has no __cuda_array_interface__");
        return NULL;
    }
    PyObject *shape = shape_tuple(self);
    if (!shape) return NULL;
    /* Transfers through pinstage have landed when they return: no stream
     * to synchronize with. */
    return Py_BuildValue("{s:N,s:s,s:(K,O),s:O,s:i,s:O}", "shape", shape, "typestr", self->typestr, "data",
                         (unsigned long long)pinstage_devbuf_ptr(self->buf), Py_False, "strides", Py_None, "version",
                         3, "stream", Py_None);
}

/* copy_from_host / copy_to_host: the driver's plain pageable path. */
static PyObject *copy_host(PsPy_DeviceArray *self, PyObject *host, int to_host) {
    if (!self->buf) return closed();
    pspy_host h;
    pspy_device d;
    memset(&d, 0, sizeof d);
    if (pspy_host_get(host, to_host, to_host ? "dst" : "src", &h) < 0) return NULL;
    if (pspy_devarray_fill(self, &d) < 0 || pspy_context(self->device) < 0) {
        pspy_host_release(&h);
        pspy_device_release(&d);
        return NULL;
    }
    d.nbytes = pinstage_devbuf_bytes(self->buf);
    pinstage_status s = PINSTAGE_SUCCESS;
    if (pspy_check_pair(&h, &d, to_host ? "dst" : "src", "the DeviceArray") == 0) {
        Py_BEGIN_ALLOW_THREADS s = to_host ? pinstage_devbuf_copy_to_host(self->buf, h.view.buf, pinstage_devbuf_len(self->buf))
                                           : pinstage_devbuf_copy_from_host(self->buf, h.view.buf, pinstage_devbuf_len(self->buf));
        Py_END_ALLOW_THREADS
    } else {
        s = -1;
    }
    pspy_host_release(&h);
    pspy_device_release(&d);
    if (s == -1) return NULL;
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *DeviceArray_copy_from_host(PsPy_DeviceArray *self, PyObject *src) { return copy_host(self, src, 0); }
static PyObject *DeviceArray_copy_to_host(PsPy_DeviceArray *self, PyObject *dst) { return copy_host(self, dst, 1); }

static PyObject *DeviceArray_repr(PsPy_DeviceArray *self) {
    if (!self->buf) return PyUnicode_FromString("<pinstage.DeviceArray closed>");
    PyObject *shape = shape_tuple(self);
    if (!shape) return NULL;
    PyObject *r = PyUnicode_FromFormat("<pinstage.DeviceArray shape=%R dtype=%s device=%d>", shape, self->typestr,
                                       self->device);
    Py_DECREF(shape);
    return r;
}

static PyMethodDef DeviceArray_methods[] = {
    {"copy_from_host", (PyCFunction)DeviceArray_copy_from_host, METH_O,
     "copy_from_host(src)\n--\n\nThe driver's plain pageable copy from host memory of the same size (the "
     "baseline); synchronous."},
    {"copy_to_host", (PyCFunction)DeviceArray_copy_to_host, METH_O,
     "copy_to_host(dst)\n--\n\nThe driver's plain pageable copy into writable host memory of the same size."},
    {"close", (PyCFunction)DeviceArray_close, METH_NOARGS,
     "close()\n--\n\nFrees the device memory now (it is freed when the object goes, otherwise)."},
    {"__enter__", DeviceArray_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)DeviceArray_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef DeviceArray_getset[] = {
    {"shape", (getter)DeviceArray_get_shape, NULL, "The shape, C order.", NULL},
    {"dtype", (getter)DeviceArray_get_dtype, NULL, "The element type as a typestr, e.g. '<f4'.", NULL},
    {"itemsize", (getter)DeviceArray_get_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", (getter)DeviceArray_get_nbytes, NULL, "Bytes in all.", NULL},
    {"ptr", (getter)DeviceArray_get_ptr, NULL, "The CUdeviceptr, as an int.", NULL},
    {"device", (getter)DeviceArray_get_device, NULL, "The device it was allocated on.", NULL},
    {"closed", (getter)DeviceArray_get_closed, NULL, "Whether its memory was freed.", NULL},
    {"__cuda_array_interface__", (getter)DeviceArray_get_cai, NULL, "Version 3 of the CUDA array interface.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PsPy_DeviceArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage.DeviceArray",
    .tp_basicsize = sizeof(PsPy_DeviceArray),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DeviceArray_init,
    .tp_dealloc = (destructor)DeviceArray_dealloc,
    .tp_repr = (reprfunc)DeviceArray_repr,
    .tp_methods = DeviceArray_methods,
    .tp_getset = DeviceArray_getset,
    .tp_doc = "DeviceArray(shape, dtype='uint8', device=-1)\n--\n\n"
              "C-contiguous device memory of `shape` (an int or a tuple) and `dtype` (a name such as 'float32', "
              "a typestr such as '<f4', or a NumPy dtype), allocated with cuMemAlloc on `device` (-1: the "
              "current context's, else device 0). Freed by close(), `with`, or when the object goes.",
};
