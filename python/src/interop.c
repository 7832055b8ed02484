/* SPDX-License-Identifier: MIT */
/* Objects in: host memory through the buffer protocol, device memory from a
 * pinstage.DeviceArray, __cuda_array_interface__ or DLPack, streams from
 * handles or stream objects; and the CUDA context a call runs in. Nothing
 * here copies data: every object is checked and its memory used in place. */
#include <stdint.h>
#include <string.h>

#include "driver.h"
#include "pinstage_py.h"

/* ---- Errors ---------------------------------------------------------------------------- */

PyObject *PsPy_Error;

static PyObject *raise_with(pinstage_status status, const char *message) {
    PyObject *text = PyUnicode_FromFormat("%s (%d): %s", pinstage_status_name(status), status, message);
    if (!text) return NULL;
    PyObject *e = PyObject_CallOneArg(PsPy_Error, text);
    Py_DECREF(text);
    if (!e) return NULL;
    PyObject *code = PyLong_FromLong(status), *name = PyUnicode_FromString(pinstage_status_name(status)),
             *msg = PyUnicode_FromString(message);
    if (code && name && msg) {
        PyObject_SetAttrString(e, "status", code);
        PyObject_SetAttrString(e, "name", name);
        PyObject_SetAttrString(e, "message", msg);
        PyErr_SetObject(PsPy_Error, e);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_XDECREF(msg);
    Py_DECREF(e);
    return NULL;
}

PyObject *pspy_raise(pinstage_status status) { return raise_with(status, pinstage_last_error_message()); }

static int raise_driver(CUresult r, const char *call) {
    char text[160];
    snprintf(text, sizeof text, "%s failed", call);
    raise_with((pinstage_status)r, text);
    return -1;
}

/* ---- The driver and contexts --------------------------------------------------------------- */

static const ps_driver *drv;
#define MAX_DEVICES 256
static CUcontext primaries[MAX_DEVICES]; /* retained once, for the process; under the GIL */
static CUevent order_events[MAX_DEVICES]; /* pspy_order_after_producer's, per device; under the GIL */

int pspy_driver(void) {
    if (drv) return 0;
    const ps_driver *d;
    pinstage_status s = ps_driver_get(&d);
    if (s) {
        pspy_raise(s);
        return -1;
    }
    drv = d;
    return 0;
}

int pspy_current_device(void) {
    CUcontext current = NULL;
    CUdevice device = -1;
    if (pspy_driver() < 0) {
        PyErr_Clear();
        return -1;
    }
    if (drv->cuCtxGetCurrent(&current) || !current || drv->cuCtxGetDevice(&device)) return -1;
    return device;
}

/* Makes the primary context of `device` current on this thread. */
static int make_current(int device) {
    CUresult r;
    if (device >= MAX_DEVICES) {
        PyErr_Format(PyExc_ValueError, "device %d does not exist", device);
        return -1;
    }
    if (!primaries[device]) {
        CUdevice dev;
        if ((r = drv->cuDeviceGet(&dev, device))) return raise_driver(r, "cuDeviceGet");
        if ((r = drv->cuDevicePrimaryCtxRetain(&primaries[device], dev))) {
            primaries[device] = NULL;
            return raise_driver(r, "cuDevicePrimaryCtxRetain");
        }
    }
    if ((r = drv->cuCtxSetCurrent(primaries[device]))) return raise_driver(r, "cuCtxSetCurrent");
    return 0;
}

int pspy_context_push(int device, void **saved) {
    if (pspy_driver() < 0) return -1;
    CUcontext current = NULL;
    CUresult r = drv->cuCtxGetCurrent(&current);
    if (r) return raise_driver(r, "cuCtxGetCurrent");
    if (make_current(device) < 0) return -1;
    *saved = current;
    return 0;
}

void pspy_context_pop(void *saved) {
    if (drv) drv->cuCtxSetCurrent((CUcontext)saved); /* the call's outcome stands either way */
}

int pspy_binding(int device, PyObject *numa_node, pinstage_binding *out) {
    int node = PINSTAGE_NUMA_DEVICE;
    if (numa_node != Py_None) {
        long v = PyLong_AsLong(numa_node);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < -1 || v > 63) {
            PyErr_Format(PyExc_ValueError, "numa_node must be None (the device's node), -1 (none) or a node below "
                                           "64; got %ld", v);
            return -1;
        }
        node = (int)v;
    }
    out->device = device;
    out->context = NULL;
    out->numa_node = node;
    return 0;
}

int pspy_context(int device) {
    if (pspy_driver() < 0) return -1;
    CUcontext current = NULL;
    CUresult r = drv->cuCtxGetCurrent(&current);
    if (r) return raise_driver(r, "cuCtxGetCurrent");
    if (current) return 0;
    return make_current(device < 0 ? 0 : device);
}

/* The device a device pointer belongs to, -1 if the driver cannot say. */
static int pointer_device(CUdeviceptr ptr) {
    int ordinal = -1;
    CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    void *data = &ordinal;
    if (drv->cuPointerGetAttributes(1, &attribute, &data, ptr) != CUDA_SUCCESS) return -1;
    return ordinal;
}

/* The memory is on `device`: a context is made current for it if none is,
 * and a context of another device is refused. */
static int bind_device(int device, const char *what) {
    if (pspy_context(device) < 0) return -1;
    int current = pspy_current_device();
    if (device >= 0 && current >= 0 && device != current) {
        PyErr_Format(PyExc_ValueError,
                     "%s is on device %d but this thread's CUDA context is device %d's "
                     "(make device %d current first, e.g. torch.cuda.set_device(%d))",
                     what, device, current, device, device);
        return -1;
    }
    return 0;
}

/* ---- Streams ------------------------------------------------------------------------------- */

static int stream_from_int(PyObject *v, CUstream *out, const char *where) {
    unsigned long long handle = PyLong_AsUnsignedLongLong(v);
    if (handle == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: a stream handle is a non-negative int", where);
        return -1;
    }
    *out = (CUstream)(uintptr_t)handle;
    return 0;
}

int pspy_stream(PyObject *obj, CUstream *out) {
    *out = NULL;
    if (!obj || obj == Py_None) return 0;
    if (PyLong_Check(obj)) return stream_from_int(obj, out, "stream");
    /* The CUDA Python stream protocol: __cuda_stream__() -> (version, handle). */
    PyObject *method = PyObject_GetAttrString(obj, "__cuda_stream__");
    if (method) {
        PyObject *pair = PyCallable_Check(method) ? PyObject_CallNoArgs(method) : Py_NewRef(method);
        Py_DECREF(method);
        if (!pair) return -1;
        int rc = -1;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 && PyLong_Check(PyTuple_GET_ITEM(pair, 1)))
            rc = stream_from_int(PyTuple_GET_ITEM(pair, 1), out, "__cuda_stream__");
        else
            PyErr_SetString(PyExc_TypeError, "__cuda_stream__() must return (version, handle)");
        Py_DECREF(pair);
        return rc;
    }
    PyErr_Clear();
    static const char *const attributes[] = {"cuda_stream", "ptr"}; /* PyTorch, CuPy */
    for (size_t i = 0; i < 2; i++) {
        PyObject *v = PyObject_GetAttrString(obj, attributes[i]);
        if (!v) {
            PyErr_Clear();
            continue;
        }
        int rc = PyLong_Check(v) ? stream_from_int(v, out, attributes[i]) : 1;
        Py_DECREF(v);
        if (rc <= 0) return rc;
    }
    PyErr_Format(PyExc_TypeError,
                 "stream must be None (the legacy default stream), an int CUstream handle, or a stream object "
                 "with cuda_stream or __cuda_stream__ (PyTorch, CuPy, CUDA Python); got %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/* ---- Host memory --------------------------------------------------------------------------- */

/* The element kind of a struct format; 0 for bytes and anything else. */
static char format_kind(const char *format) {
    if (!format) return 0;
    while (*format == '@' || *format == '=' || *format == '<' || *format == '>' || *format == '!') format++;
    if (format[0] && format[1] && !(format[0] == 'Z' && format[2] == 0)) return 0; /* records and arrays: bytes */
    switch (format[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': return 'i';
    case 'H': case 'I': case 'L': case 'Q': case 'N': return 'u';
    case 'e': case 'f': case 'd': return 'f';
    case '?': return 'b';
    case 'Z': return 'c';
    default: return 0; /* 'B', 'c', 'x': bytes */
    }
}

int pspy_host_get(PyObject *obj, int writable, const char *what, pspy_host *h) {
    memset(h, 0, sizeof *h);
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be host memory with the buffer protocol (a NumPy array, bytearray, memoryview, "
                     "array.array); got %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &h->view, flags) < 0) {
        /* Say which: read-only where it must be written, or not contiguous. */
        Py_buffer probe;
        PyErr_Clear();
        if (PyObject_GetBuffer(obj, &probe, PyBUF_FULL_RO) == 0) {
            int readonly = probe.readonly, contiguous = PyBuffer_IsContiguous(&probe, 'C');
            PyBuffer_Release(&probe);
            if (writable && readonly)
                PyErr_Format(PyExc_TypeError, "%s must be writable host memory; %.100s is read-only", what,
                             Py_TYPE(obj)->tp_name);
            else if (!contiguous)
                PyErr_Format(PyExc_ValueError, "%s must be C-contiguous host memory (e.g. numpy.ascontiguousarray)",
                             what);
            else
                PyErr_Format(PyExc_TypeError, "%s: its buffer cannot be used", what);
        } else {
            PyErr_Format(PyExc_TypeError, "%s: its buffer cannot be used", what);
        }
        return -1;
    }
    h->held = 1;
    if (h->view.len == 0) {
        PyErr_Format(PyExc_ValueError, "%s is empty", what);
        pspy_host_release(h);
        return -1;
    }
    h->kind = format_kind(h->view.format);
    h->itemsize = h->view.itemsize;
    return 0;
}

void pspy_host_release(pspy_host *h) {
    if (h->held) PyBuffer_Release(&h->view);
    h->held = 0;
}

/* ---- Device memory ----------------------------------------------------------------------- */

/* A struct format for an element kind and size; "" when there is none. */
static void format_of(char kind, size_t size, char *out) {
    const char *f = "";
    if (kind == 'f') f = size == 2 ? "e" : size == 4 ? "f" : size == 8 ? "d" : "";
    else if (kind == 'i') f = size == 1 ? "b" : size == 2 ? "h" : size == 4 ? "i" : size == 8 ? "q" : "";
    else if (kind == 'u') f = size == 1 ? "B" : size == 2 ? "H" : size == 4 ? "I" : size == 8 ? "Q" : "";
    else if (kind == 'b') f = size == 1 ? "?" : "";
    else if (kind == 'c') f = size == 8 ? "Zf" : size == 16 ? "Zd" : "";
    snprintf(out, 4, "%s", f);
}

static const char *kind_name(char kind) {
    switch (kind) {
    case 'f': return "float";
    case 'i': return "int";
    case 'u': return "uint";
    case 'b': return "bool";
    case 'c': return "complex";
    case 'B': return "bfloat";
    default: return "bytes";
    }
}

/* Whether `strides` (in bytes; NULL: none given) are C-contiguous. */
static int c_contiguous(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides, size_t itemsize) {
    if (!strides) return 1;
    Py_ssize_t want = (Py_ssize_t)itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] > 1 && strides[i] != want) return 0;
        want *= shape[i];
    }
    return 1;
}

static int finish_device(pspy_device *d, const char *what, int writable, Py_ssize_t *strides) {
    size_t count = 1;
    for (int i = 0; i < d->ndim; i++) count *= (size_t)d->shape[i];
    d->nbytes = count * d->itemsize;
    if (!c_contiguous(d->ndim, d->shape, strides, d->itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous device memory (e.g. tensor.contiguous())", what);
        return -1;
    }
    if (d->nbytes == 0) {
        PyErr_Format(PyExc_ValueError, "%s is empty", what);
        return -1;
    }
    if (writable && d->readonly) {
        PyErr_Format(PyExc_ValueError, "%s is read-only device memory", what);
        return -1;
    }
    format_of(d->kind, d->itemsize, d->format);
    return 0;
}

/* "<f4", "|u1", "<i8", "<c8", "|b1", "<V2" (bytes). */
static int parse_typestr(const char *t, pspy_device *d, const char *what) {
    if (strlen(t) < 3 || !strchr("<>|=", t[0])) {
        PyErr_Format(PyExc_ValueError, "%s: typestr '%s' is not understood", what, t);
        return -1;
    }
    if (t[0] == '>') {
        PyErr_Format(PyExc_ValueError, "%s: big-endian device memory ('%s') is not supported", what, t);
        return -1;
    }
    long size = strtol(t + 2, NULL, 10);
    if (size <= 0) {
        PyErr_Format(PyExc_ValueError, "%s: typestr '%s' is not understood", what, t);
        return -1;
    }
    d->itemsize = (size_t)size;
    d->kind = t[1] == 'f' ? 'f' : t[1] == 'i' ? 'i' : t[1] == 'u' ? 'u' : t[1] == 'b' ? 'b' : t[1] == 'c' ? 'c' : 0;
    return 0;
}

static int parse_shape(PyObject *shape, pspy_device *d, const char *what) {
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > PSPY_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: shape must be a tuple of at most %d ints", what, PSPY_MAX_DIMS);
        return -1;
    }
    d->ndim = (int)PyTuple_GET_SIZE(shape);
    for (int i = 0; i < d->ndim; i++) {
        d->shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (d->shape[i] < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: negative extent in shape", what);
            return -1;
        }
    }
    return 0;
}

static int from_cuda_array_interface(PyObject *obj, PyObject *cai, int writable, const char *what, pspy_device *d) {
    if (!PyDict_Check(cai)) {
        PyErr_Format(PyExc_TypeError, "%s: __cuda_array_interface__ is not a dict", what);
        return -1;
    }
    PyObject *data = PyDict_GetItemString(cai, "data"), *shape = PyDict_GetItemString(cai, "shape");
    PyObject *typestr = PyDict_GetItemString(cai, "typestr"), *strides = PyDict_GetItemString(cai, "strides");
    PyObject *mask = PyDict_GetItemString(cai, "mask"), *stream = PyDict_GetItemString(cai, "stream");
    if (!data || !shape || !typestr || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || !PyUnicode_Check(typestr)) {
        PyErr_Format(PyExc_ValueError, "%s: __cuda_array_interface__ lacks data, shape or typestr", what);
        return -1;
    }
    if (mask && mask != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: masked device arrays are not supported", what);
        return -1;
    }
    d->ptr = (CUdeviceptr)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    if (PyErr_Occurred()) return -1;
    d->readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1)) == 1;
    if (parse_shape(shape, d, what) < 0 || parse_typestr(PyUnicode_AsUTF8(typestr), d, what) < 0) return -1;
    Py_ssize_t stride_bytes[PSPY_MAX_DIMS], *sp = NULL;
    if (strides && strides != Py_None) {
        if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != d->ndim) {
            PyErr_Format(PyExc_ValueError, "%s: strides do not match the shape", what);
            return -1;
        }
        for (int i = 0; i < d->ndim; i++) stride_bytes[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
        if (PyErr_Occurred()) return -1;
        sp = stride_bytes;
    }
    if (stream && stream != Py_None) {
        CUstream s;
        if (stream_from_int(stream, &s, "__cuda_array_interface__ stream") < 0) return -1;
        d->producer_stream = s;
        d->has_producer_stream = 1;
    }
    if (finish_device(d, what, writable, sp) < 0) return -1;
    /* The interface does not say which device: the driver does, in a context. */
    int had_context = pspy_current_device() >= 0;
    if (pspy_context(0) < 0) return -1;
    d->device = pointer_device(d->ptr);
    if (d->device < 0) {
        PyErr_Format(PyExc_ValueError, "%s: address %p is not device memory the driver knows", what,
                     (void *)(uintptr_t)d->ptr);
        return -1;
    }
    if (!had_context && d->device != 0 && make_current(d->device) < 0) return -1;
    if (bind_device(d->device, what) < 0) return -1;
    d->keep = Py_NewRef(obj);
    return 0;
}

/* DLPack (v0.x ABI): what __dlpack__ returns in a "dltensor" capsule. */
typedef struct {
    int32_t device_type, device_id;
} dl_device;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
    dl_tensor tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;
enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };

static int from_dlpack(PyObject *obj, int writable, const char *what, CUstream stream, pspy_device *d) {
    /* Where it lives first: __dlpack__ of a CPU tensor succeeds too. */
    PyObject *where = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!where) return -1;
    long type = -1, id = -1;
    if (PyTuple_Check(where) && PyTuple_GET_SIZE(where) == 2) {
        type = PyLong_AsLong(PyTuple_GET_ITEM(where, 0));
        id = PyLong_AsLong(PyTuple_GET_ITEM(where, 1));
    }
    Py_DECREF(where);
    if (PyErr_Occurred()) return -1;
    if (type != DL_CUDA && type != DL_CUDA_MANAGED) {
        PyErr_Format(PyExc_TypeError, "%s is not device memory (its DLPack device type is %ld%s)", what, type,
                     type == DL_CPU ? ", the CPU: pass it as host memory" : "");
        return -1;
    }
    if (bind_device((int)id, what) < 0) return -1;
    /* The producer orders its own work before our stream's (1: the legacy stream). */
    PyObject *kwargs = Py_BuildValue("{s:K}", "stream",
                                     (unsigned long long)(stream ? (uintptr_t)stream : (uintptr_t)1));
    PyObject *method = kwargs ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
    PyObject *empty = PyTuple_New(0);
    PyObject *capsule = method && empty ? PyObject_Call(method, empty, kwargs) : NULL;
    Py_XDECREF(method);
    Py_XDECREF(empty);
    Py_XDECREF(kwargs);
    if (!capsule) return -1;
    dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (!m) {
        Py_DECREF(capsule);
        return -1;
    }
    /* Consumed: the capsule must not free it any more; we call its deleter. */
    PyCapsule_SetName(capsule, "used_dltensor");
    Py_DECREF(capsule);
    d->dlpack = m;
    dl_tensor *t = &m->tensor;
    if (t->dtype.lanes != 1 || t->dtype.bits % 8 || !t->dtype.bits || t->ndim < 0 || t->ndim > PSPY_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: DLPack element type (code %u, %u bits, %u lanes) is not supported", what,
                     t->dtype.code, t->dtype.bits, t->dtype.lanes);
        return -1;
    }
    d->ptr = (CUdeviceptr)(uintptr_t)t->data + t->byte_offset;
    d->itemsize = t->dtype.bits / 8;
    d->kind = t->dtype.code == DL_INT ? 'i' : t->dtype.code == DL_UINT ? 'u' : t->dtype.code == DL_FLOAT ? 'f'
              : t->dtype.code == DL_BFLOAT ? 'B' : t->dtype.code == DL_COMPLEX ? 'c' : t->dtype.code == DL_BOOL ? 'b'
                                                                                                       : 0;
    d->device = (int)id;
    d->ndim = t->ndim;
    Py_ssize_t strides[PSPY_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        d->shape[i] = (Py_ssize_t)t->shape[i];
        if (t->strides) strides[i] = (Py_ssize_t)t->strides[i] * (Py_ssize_t)d->itemsize;
    }
    if (finish_device(d, what, writable, t->strides ? strides : NULL) < 0) return -1;
    d->keep = Py_NewRef(obj);
    return 0;
}

/* ---- PyTorch tensors ------------------------------------------------------------------------
 * torch.Tensor's __cuda_array_interface__ is a Python property that builds a dict on every read:
 * on the H200 machine a 4 KiB transfer through the module cost 3.5-4.4 µs more with a tensor than
 * with a pinstage.DeviceArray. For a plain torch.Tensor the same facts come from its C getters. The
 * interface it would give is version 2 (no stream), so nothing is lost; whatever the property
 * treats specially (requires_grad, a sparse layout, a dtype outside the table below), a subclass
 * and a non-contiguous tensor take the general path, so errors read the same. Under the GIL. */

enum { TORCH_DTYPES = 13 };
static struct {
    PyTypeObject *type; /* torch.Tensor once seen; a strong reference kept for the process */
    int unusable;       /* a class named torch.Tensor whose module lacks what is read below */
    PyObject *strided;
    PyObject *dtypes[TORCH_DTYPES];
    char kinds[TORCH_DTYPES];
    unsigned char sizes[TORCH_DTYPES];
    PyObject *is_cuda, *requires_grad, *layout, *dtype, *shape, *data_ptr, *get_device, *is_contiguous;
} torch_fast;

static int torch_fast_init(PyTypeObject *type) {
    static const struct {
        const char *name;
        char kind;
        unsigned char size;
    } table[TORCH_DTYPES] = {{"float32", 'f', 4}, {"float16", 'f', 2}, {"float64", 'f', 8}, {"bfloat16", 'B', 2},
                             {"uint8", 'u', 1},   {"int8", 'i', 1},    {"int16", 'i', 2},   {"int32", 'i', 4},
                             {"int64", 'i', 8},   {"bool", 'b', 1},    {"uint16", 'u', 2},  {"uint32", 'u', 4},
                             {"uint64", 'u', 8}};
    PyObject *torch = PyImport_ImportModule("torch"); /* already imported: its tensors exist */
    if (!torch) return -1;
    torch_fast.strided = PyObject_GetAttrString(torch, "strided");
    for (int i = 0; i < TORCH_DTYPES && torch_fast.strided; i++) {
        torch_fast.dtypes[i] = PyObject_GetAttrString(torch, table[i].name);
        if (!torch_fast.dtypes[i]) PyErr_Clear(); /* older releases lack the unsigned ones */
        torch_fast.kinds[i] = table[i].kind;
        torch_fast.sizes[i] = table[i].size;
    }
    Py_DECREF(torch);
    PyObject **names[] = {&torch_fast.is_cuda, &torch_fast.requires_grad, &torch_fast.layout,
                          &torch_fast.dtype,   &torch_fast.shape,         &torch_fast.data_ptr,
                          &torch_fast.get_device, &torch_fast.is_contiguous};
    const char *spelled[] = {"is_cuda", "requires_grad", "layout", "dtype", "shape", "data_ptr", "get_device",
                             "is_contiguous"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && torch_fast.strided; i++)
        if (!(*names[i] = PyUnicode_InternFromString(spelled[i]))) return -1;
    if (!torch_fast.strided || !torch_fast.dtypes[0]) return -1;
    torch_fast.type = (PyTypeObject *)Py_NewRef((PyObject *)type);
    return 0;
}

/* Whether `obj` is a torch.Tensor itself (not a subclass), found without importing torch. */
static int is_torch_tensor(PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    if (torch_fast.type) return type == torch_fast.type;
    if (torch_fast.unusable || strcmp(type->tp_name, "Tensor")) return 0;
    PyObject *module = PyObject_GetAttrString((PyObject *)type, "__module__");
    int named = module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "torch") == 0;
    Py_XDECREF(module);
    if (named && torch_fast_init(type) == 0) return 1;
    PyErr_Clear();
    torch_fast.unusable = named;
    return 0;
}

/* 0: filled; 1: the general path decides (no error set); -1: raised. */
static int from_torch(PyObject *obj, int writable, const char *what, pspy_device *d) {
    PyObject *cuda = PyObject_GetAttr(obj, torch_fast.is_cuda);
    PyObject *grad = cuda ? PyObject_GetAttr(obj, torch_fast.requires_grad) : NULL;
    PyObject *layout = grad ? PyObject_GetAttr(obj, torch_fast.layout) : NULL;
    PyObject *dtype = layout ? PyObject_GetAttr(obj, torch_fast.dtype) : NULL;
    PyObject *contiguous = NULL, *shape = NULL, *ptr = NULL, *device = NULL;
    int rc = 1, which = -1;
    if (!dtype) {
        PyErr_Clear();
        goto done;
    }
    for (int i = 0; i < TORCH_DTYPES; i++)
        if (torch_fast.dtypes[i] && dtype == torch_fast.dtypes[i]) which = i;
    if (cuda != Py_True || grad != Py_False || layout != torch_fast.strided || which < 0) goto done;
    contiguous = PyObject_CallMethodObjArgs(obj, torch_fast.is_contiguous, NULL);
    if (contiguous != Py_True) {
        PyErr_Clear();
        goto done;
    }
    rc = -1;
    if (!(shape = PyObject_GetAttr(obj, torch_fast.shape)) ||
        !(ptr = PyObject_CallMethodObjArgs(obj, torch_fast.data_ptr, NULL)) ||
        !(device = PyObject_CallMethodObjArgs(obj, torch_fast.get_device, NULL)))
        goto done;
    d->ptr = (CUdeviceptr)PyLong_AsUnsignedLongLong(ptr);
    d->device = (int)PyLong_AsLong(device);
    d->itemsize = torch_fast.sizes[which];
    d->kind = torch_fast.kinds[which];
    if (PyErr_Occurred() || parse_shape(shape, d, what) < 0) goto done;
    if (finish_device(d, what, writable, NULL) < 0 || bind_device(d->device, what) < 0) goto done;
    d->keep = Py_NewRef(obj);
    rc = 0;
done:
    Py_XDECREF(cuda), Py_XDECREF(grad), Py_XDECREF(layout), Py_XDECREF(dtype);
    Py_XDECREF(contiguous), Py_XDECREF(shape), Py_XDECREF(ptr), Py_XDECREF(device);
    return rc;
}

int pspy_device_get(PyObject *obj, int writable, const char *what, CUstream stream, pspy_device *d) {
    memset(d, 0, sizeof *d);
    d->device = -1;
    if (PyObject_TypeCheck(obj, &PsPy_DeviceArrayType)) {
        if (pspy_devarray_fill((PsPy_DeviceArray *)obj, d) < 0) return -1;
        if (finish_device(d, what, writable, NULL) < 0 || bind_device(d->device, what) < 0) {
            pspy_device_release(d);
            return -1;
        }
        return 0;
    }
    int rc;
    if (is_torch_tensor(obj) && (rc = from_torch(obj, writable, what, d)) <= 0) {
        if (rc < 0) pspy_device_release(d);
        return rc;
    }
    PyObject *cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
    if (cai) {
        rc = from_cuda_array_interface(obj, cai, writable, what, d);
        Py_DECREF(cai);
    } else {
        /* No interface (a CPU tensor), or one that refuses its element type
         * (a bfloat16 tensor): DLPack says more. Other errors propagate. */
        int absent = PyErr_ExceptionMatches(PyExc_AttributeError) || PyErr_ExceptionMatches(PyExc_TypeError);
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (absent && PyObject_HasAttrString(obj, "__dlpack__")) {
            Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(traceback);
            rc = from_dlpack(obj, writable, what, stream, d);
        } else if (!absent) {
            PyErr_Restore(type, value, traceback);
            rc = -1;
        } else {
            Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(traceback);
            PyErr_Format(PyExc_TypeError,
                         "%s must be device memory: a pinstage.DeviceArray, or an object with "
                         "__cuda_array_interface__ or __dlpack__ (a PyTorch CUDA tensor, a CuPy array, a Numba "
                         "device array); got %.100s",
                         what, Py_TYPE(obj)->tp_name);
            rc = -1;
        }
    }
    if (rc < 0) pspy_device_release(d);
    return rc;
}

void pspy_device_release(pspy_device *d) {
    if (d->dlpack) {
        /* The producer's deleter may run Python: not with an error pending. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        dl_managed *m = d->dlpack;
        d->dlpack = NULL;
        if (m->deleter) m->deleter(m);
        PyErr_Restore(type, value, traceback);
    }
    Py_CLEAR(d->keep);
}

pinstage_status pspy_order_after_producer(const pspy_device *d, CUstream stream) {
    if (!d->has_producer_stream || !drv) return PINSTAGE_SUCCESS;
    CUstream producer = d->producer_stream;
    /* The legacy stream has two spellings; the per-thread one is its own. */
    if ((ps_is_legacy_stream(producer) && ps_is_legacy_stream(stream)) || producer == stream) return PINSTAGE_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    CUevent *event = &order_events[d->device >= 0 && d->device < MAX_DEVICES ? d->device : 0];
    const char *call = "cuEventCreate";
    if (!*event) r = drv->cuEventCreate(event, CU_EVENT_DISABLE_TIMING);
    if (!r && (call = "cuEventRecord") && !(r = drv->cuEventRecord(*event, producer)))
        r = drv->cuStreamWaitEvent(stream, *event, 0), call = "cuStreamWaitEvent";
    if (r) raise_driver(r, call);
    return (pinstage_status)r;
}

int pspy_check_pair(const pspy_host *h, const pspy_device *d, const char *host_what, const char *device_what) {
    /* The element types first: float64 host memory for a float32 tensor is
     * the mistake to name, not the byte counts it leads to. */
    if (h->kind && d->kind && (h->kind != d->kind || (size_t)h->itemsize != d->itemsize)) {
        PyErr_Format(PyExc_TypeError, "%s holds %s%zd elements (format '%s') but %s holds %s%zu elements", host_what,
                     kind_name(h->kind), h->itemsize * 8, h->view.format ? h->view.format : "B", device_what,
                     kind_name(d->kind), d->itemsize * 8);
        return -1;
    }
    if ((size_t)h->view.len != d->nbytes) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes but %s holds %zu bytes (%zu elements of %zu bytes)",
                     host_what, h->view.len, device_what, d->nbytes, d->nbytes / d->itemsize, d->itemsize);
        return -1;
    }
    return 0;
}

pinstage_status pspy_devbuf(const pspy_device *d, pinstage_devbuf **out) {
    return pinstage_devbuf_wrap(out, d->ptr, d->nbytes, 1, 1);
}

/* ---- Object locks ------------------------------------------------------------------------ */

int pspy_lock_init(pspy_lock *l) {
    l->owner = 0;
    l->lock = PyThread_allocate_lock();
    if (!l->lock) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void pspy_lock_free(pspy_lock *l) {
    if (l->lock) PyThread_free_lock(l->lock);
    l->lock = NULL;
}

int pspy_lock_take(pspy_lock *l, const char *what) {
    unsigned long me = PyThread_get_thread_ident();
    if (l->owner == me) {
        PyErr_Format(PyExc_RuntimeError, "%s: called while this thread's own call on the same object is running "
                                         "(from its fill callback?)", what);
        return -1;
    }
    if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(l->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    l->owner = me;
    return 0;
}

void pspy_lock_give(pspy_lock *l) {
    l->owner = 0;
    PyThread_release_lock(l->lock);
}
