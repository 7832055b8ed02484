/* SPDX-License-Identifier: MIT */
/* pinstage.Buffer: pinstage_buffer_* for Python objects. Each call: check
 * the arguments with the GIL held, end the views of the pinned memory it
 * will reuse, then the transfer with the GIL released. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "pinstage_py.h"

typedef struct {
    PyObject_HEAD
    pinstage_buffer *buf; /* NULL once closed */
    pspy_lock lock;
    pspy_views views;
    PyObject *profile; /* the pinstage.Profile set, or NULL */
    int device;        /* for a context when the call has no device memory; the bound one */
    int bound;         /* bound to `device` (pinstage_buffer_bind) */
    void *saved;       /* a bound buffer's call: the caller's context, given back at its end */
    int pushed;
    int strict, adaptive;
} PsPy_Buffer;

static PyObject *closed(const char *what) {
    PyErr_Format(PyExc_ValueError, "pinstage.Buffer.%s: the buffer is closed", what);
    return NULL;
}

/* Ends a call: the caller's context back (a bound buffer's call), the lock. */
static void give(PsPy_Buffer *self) {
    if (self->pushed) pspy_context_pop(self->saved);
    self->pushed = 0;
    pspy_lock_give(&self->lock);
}

/* Takes the lock and ends the views: the pinned memory is the call's. A
 * bound buffer's call runs in its device's context, so the objects given
 * are resolved and checked against that device. */
static int begin(PsPy_Buffer *self, const char *what) {
    if (!self->buf) return closed(what), -1;
    if (pspy_lock_take(&self->lock, what) < 0) return -1;
    if (!self->buf) {
        give(self);
        return closed(what), -1;
    }
    if (pspy_views_end(&self->views, what) < 0) {
        give(self);
        return -1;
    }
    if (self->bound && pspy_context_push(self->device, &self->saved) < 0) {
        give(self);
        return -1;
    }
    self->pushed = self->bound;
    return 0;
}

static PyObject *end(PsPy_Buffer *self, pinstage_status s) {
    give(self);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

/* ---- Life ------------------------------------------------------------------------------- */

static int Buffer_init(PsPy_Buffer *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"capacity", "threshold", "profile", "strict", "adaptive", "device", "numa_node", NULL};
    Py_ssize_t capacity = 0;
    PyObject *threshold = Py_None, *profile = Py_None, *numa_node = Py_None;
    int strict = 0, adaptive = 1, device = -1;
    pinstage_binding binding;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|n$OOppiO:Buffer", names, &capacity, &threshold, &profile,
                                     &strict, &adaptive, &device, &numa_node))
        return -1;
    if (device < 0 && numa_node != Py_None) {
        PyErr_SetString(PyExc_ValueError, "numa_node is for a Buffer bound to a device: give device= too");
        return -1;
    }
    if (device >= 0 && pspy_binding(device, numa_node, &binding) < 0) return -1;
    if (capacity < 0) {
        PyErr_SetString(PyExc_ValueError, "capacity must be 0 or more bytes");
        return -1;
    }
    if (self->buf) {
        PyErr_SetString(PyExc_RuntimeError, "pinstage.Buffer is already initialized");
        return -1;
    }
    if (pspy_lock_init(&self->lock) < 0) return -1;
    self->device = device;
    pinstage_status s = pinstage_buffer_create(&self->buf);
    if (s) return pspy_raise(s), -1;
    /* Bound: its context around each of its calls, its memory and copy
     * threads on its GPU's NUMA node. */
    if (device >= 0 && (s = pinstage_buffer_bind(self->buf, &binding))) {
        pinstage_buffer_free(self->buf);
        self->buf = NULL;
        return pspy_raise(s), -1;
    }
    self->bound = device >= 0;
    self->strict = strict;
    self->adaptive = adaptive;
    pinstage_buffer_set_strict(self->buf, strict);
    pinstage_buffer_set_adaptive(self->buf, adaptive);
    if (threshold != Py_None && PyObject_SetAttrString((PyObject *)self, "threshold", threshold) < 0) return -1;
    if (profile != Py_None && PyObject_SetAttrString((PyObject *)self, "profile", profile) < 0) return -1;
    if (capacity > 0) {
        if (pspy_context(device) < 0) return -1;
        Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_reserve(self->buf, (size_t)capacity);
        Py_END_ALLOW_THREADS
        if (s) return pspy_raise(s), -1;
    }
    return 0;
}

/* Frees the buffer; a context is made current for its pinned memory. */
static pinstage_status free_buffer(PsPy_Buffer *self) {
    pinstage_buffer *buf = self->buf;
    self->buf = NULL;
    if (!buf) return PINSTAGE_SUCCESS;
    if (pinstage_buffer_capacity(buf) && pspy_context(self->device) < 0) PyErr_Clear();
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_free(buf);
    Py_END_ALLOW_THREADS
    return s;
}

static void Buffer_dealloc(PsPy_Buffer *self) {
    /* No view is alive: each keeps its buffer alive. */
    pspy_views_clear(&self->views);
    if (free_buffer(self)) PyErr_Clear();
    pspy_lock_free(&self->lock);
    Py_XDECREF(self->profile);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Buffer_close(PsPy_Buffer *self, PyObject *unused) {
    (void)unused;
    if (!self->buf) Py_RETURN_NONE;
    if (begin(self, "close") < 0) return NULL;
    return end(self, free_buffer(self));
}

static PyObject *Buffer_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    if (!((PsPy_Buffer *)self)->buf) return closed("__enter__");
    return Py_NewRef(self);
}

static PyObject *Buffer_exit(PsPy_Buffer *self, PyObject *args) {
    (void)args;
    PyObject *r = Buffer_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* ---- Capacity, settings, stats ---------------------------------------------------------------- */

static PyObject *Buffer_reserve(PsPy_Buffer *self, PyObject *arg) {
    Py_ssize_t bytes = PyLong_AsSsize_t(arg);
    if (bytes == -1 && PyErr_Occurred()) return NULL;
    if (bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "reserve: bytes must be positive");
        return NULL;
    }
    if (begin(self, "reserve") < 0) return NULL;
    if (pspy_context(self->device) < 0) {
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_reserve(self->buf, (size_t)bytes);
    Py_END_ALLOW_THREADS
    return end(self, s);
}

static PyObject *Buffer_shrink_to_fit(PsPy_Buffer *self, PyObject *unused) {
    (void)unused;
    if (begin(self, "shrink_to_fit") < 0) return NULL;
    if (pinstage_buffer_capacity(self->buf) && pspy_context(self->device) < 0) {
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_shrink_to_fit(self->buf);
    Py_END_ALLOW_THREADS
    return end(self, s);
}

static PyObject *Buffer_stats(PsPy_Buffer *self, PyObject *unused) {
    (void)unused;
    pinstage_stats st;
    pinstage_buffer_stats(self->buf, &st); /* zeroes once closed */
    PyObject *r = PyStructSequence_New(PsPy_StatsType);
    if (!r) return NULL;
    unsigned long long v[] = {st.pinned_allocations, st.staged_transfers, st.pageable_transfers, st.bytes_uploaded,
                              st.bytes_downloaded, st.pin_time_ns, st.peak_capacity, st.engine_transfers,
                              st.pinned_host_transfers, st.retired_blocks, st.pinned_fallbacks,
                              st.release_failures, st.route_probes, st.route_overrides};
    for (Py_ssize_t i = 0; i < (Py_ssize_t)(sizeof v / sizeof v[0]); i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
        if (!x) {
            Py_DECREF(r);
            return NULL;
        }
        PyStructSequence_SET_ITEM(r, i, x);
    }
    return r;
}

static PyObject *Buffer_placement(PsPy_Buffer *self, PyObject *unused) {
    (void)unused;
    if (!self->buf) return closed("placement");
    pinstage_placement where;
    pinstage_status s = pinstage_buffer_get_placement(self->buf, &where);
    return s ? pspy_raise(s) : pspy_placement_new(&where);
}

static PyObject *Buffer_get_capacity(PsPy_Buffer *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(pinstage_buffer_capacity(self->buf));
}

static PyObject *Buffer_get_closed(PsPy_Buffer *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->buf == NULL);
}

static PyObject *Buffer_get_threshold(PsPy_Buffer *self, void *c) {
    (void)c;
    size_t t = pinstage_buffer_auto_stage_max_bytes(self->buf);
    if (t == PINSTAGE_AUTO_STAGE_PROFILE || !self->buf) Py_RETURN_NONE;
    return PyLong_FromSize_t(t);
}

static int Buffer_set_threshold(PsPy_Buffer *self, PyObject *v, void *c) {
    (void)c;
    if (!self->buf) return closed("threshold"), -1;
    size_t t = PINSTAGE_AUTO_STAGE_PROFILE;
    if (v && v != Py_None) {
        Py_ssize_t n = PyLong_AsSsize_t(v);
        if (n == -1 && PyErr_Occurred()) return -1;
        if (n < 0) {
            PyErr_SetString(PyExc_ValueError, "threshold must be None (the profile decides) or 0 or more bytes");
            return -1;
        }
        t = (size_t)n;
    }
    pinstage_buffer_set_auto_stage_max_bytes(self->buf, t);
    return 0;
}

static PyObject *Buffer_get_profile(PsPy_Buffer *self, void *c) {
    (void)c;
    return Py_NewRef(self->profile ? self->profile : Py_None);
}

static int Buffer_set_profile(PsPy_Buffer *self, PyObject *v, void *c) {
    (void)c;
    if (!self->buf) return closed("profile"), -1;
    if (v && v != Py_None && !PyObject_TypeCheck(v, &PsPy_ProfileType)) {
        PyErr_Format(PyExc_TypeError, "profile must be a pinstage.Profile or None; got %.100s", Py_TYPE(v)->tp_name);
        return -1;
    }
    int given = v && v != Py_None;
    pinstage_status s = pinstage_buffer_set_profile(self->buf, given ? ((PsPy_Profile *)v)->profile : NULL);
    if (s) return pspy_raise(s), -1;
    Py_XSETREF(self->profile, given ? Py_NewRef(v) : NULL);
    return 0;
}

static PyObject *Buffer_get_strict(PsPy_Buffer *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->strict);
}

static int Buffer_set_strict(PsPy_Buffer *self, PyObject *v, void *c) {
    (void)c;
    int on = v ? PyObject_IsTrue(v) : 0;
    if (on < 0) return -1;
    self->strict = on;
    pinstage_buffer_set_strict(self->buf, on);
    return 0;
}

static PyObject *Buffer_get_adaptive(PsPy_Buffer *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->adaptive);
}

static int Buffer_set_adaptive(PsPy_Buffer *self, PyObject *v, void *c) {
    (void)c;
    int on = v ? PyObject_IsTrue(v) : 1;
    if (on < 0) return -1;
    self->adaptive = on;
    pinstage_buffer_set_adaptive(self->buf, on);
    return 0;
}

/* ---- Transfers -------------------------------------------------------------------------------- */

/* The arguments of one transfer, taken apart. */
typedef struct {
    pspy_host host;
    pspy_device device;
    pinstage_devbuf *devbuf;
    CUstream stream;
} transfer;

static void transfer_release(transfer *t) {
    pinstage_devbuf_free(t->devbuf);
    t->devbuf = NULL;
    pspy_host_release(&t->host);
    pspy_device_release(&t->device);
}

/* Device memory (and host memory when `host` is given), checked against
 * each other, the stream, and the producer's stream ordered before ours. */
static int transfer_get(transfer *t, PyObject *device, int device_written, const char *device_what, PyObject *host,
                        int host_written, const char *host_what, PyObject *stream) {
    memset(t, 0, sizeof *t);
    if (pspy_stream(stream, &t->stream) < 0) return -1;
    if (host && pspy_host_get(host, host_written, host_what, &t->host) < 0) return -1;
    if (pspy_device_get(device, device_written, device_what, t->stream, &t->device) < 0 ||
        (host && pspy_check_pair(&t->host, &t->device, host_what, device_what) < 0)) {
        transfer_release(t);
        return -1;
    }
    pinstage_status s = pspy_devbuf(&t->device, &t->devbuf);
    if (s) pspy_raise(s);
    if (s || pspy_order_after_producer(&t->device, t->stream)) {
        transfer_release(t);
        return -1;
    }
    return 0;
}

static PyObject *Buffer_upload(PsPy_Buffer *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dst", "src", "stream", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    transfer t;
    if (pspy_args("upload", args, nargs, kwnames, names, 2, a) < 0 || begin(self, "upload") < 0) return NULL;
    if (transfer_get(&t, a[0], 1, "dst", a[1], 0, "src", a[2]) < 0) {
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_upload(self->buf, t.devbuf, t.host.view.buf, t.device.nbytes, t.stream);
    Py_END_ALLOW_THREADS
    transfer_release(&t);
    return end(self, s);
}

static PyObject *Buffer_download(PsPy_Buffer *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dst", "src", "stream", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    transfer t;
    if (pspy_args("download", args, nargs, kwnames, names, 2, a) < 0 || begin(self, "download") < 0) return NULL;
    if (transfer_get(&t, a[1], 0, "src", a[0], 1, "dst", a[2]) < 0) {
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s =
        pinstage_buffer_download(self->buf, t.host.view.buf, t.device.nbytes, t.devbuf, t.stream);
    Py_END_ALLOW_THREADS
    transfer_release(&t);
    return end(self, s);
}

static PyObject *Buffer_upload_with(PsPy_Buffer *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dst", "fill", "stream", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    transfer t;
    if (pspy_args("upload_with", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!PyCallable_Check(a[1])) {
        PyErr_Format(PyExc_TypeError, "upload_with: fill must be callable (it is given a writable memoryview of the "
                                      "pinned memory); got %.100s", Py_TYPE(a[1])->tp_name);
        return NULL;
    }
    if (begin(self, "upload_with") < 0) return NULL;
    if (transfer_get(&t, a[0], 1, "dst", NULL, 0, NULL, a[2]) < 0) {
        give(self);
        return NULL;
    }
    pspy_fill_call f = {(PyObject *)self, a[1], &self->views, &t.device, NULL, NULL, NULL};
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_upload_with(self->buf, t.devbuf, t.device.nbytes, t.stream, pspy_call_fill, &f);
    Py_END_ALLOW_THREADS
    transfer_release(&t);
    give(self);
    if (f.error_type) {
        /* The fill's exception wins: the copy went ahead with what it wrote. */
        PyErr_Restore(f.error_type, f.error_value, f.error_traceback);
        return NULL;
    }
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *Buffer_download_into(PsPy_Buffer *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames) {
    static const char *const names[] = {"src", "stream", NULL};
    PyObject *a[2] = {NULL, NULL};
    transfer t;
    if (pspy_args("download_into", args, nargs, kwnames, names, 1, a) < 0 || begin(self, "download_into") < 0)
        return NULL;
    if (transfer_get(&t, a[0], 0, "src", NULL, 0, NULL, a[1]) < 0) {
        give(self);
        return NULL;
    }
    const void *pinned = NULL;
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_buffer_download_into(self->buf, t.devbuf, t.device.nbytes, t.stream, &pinned);
    Py_END_ALLOW_THREADS
    PyObject *view = NULL;
    if (!s) view = pspy_view_new(&self->views, (PyObject *)self, (void *)pinned, t.device.nbytes, &t.device, 1);
    transfer_release(&t);
    give(self);
    if (s) return pspy_raise(s);
    return view;
}

/* _c_loop: the same transfer `count` times from C, each timed alone, for
 * measuring what the module adds to a call (bench/peers.py). */
static void no_fill(void *dst, size_t n, void *user) { (void)dst, (void)n, (void)user; }

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static PyObject *Buffer_c_loop(PsPy_Buffer *self, PyObject *args) {
    PyObject *device, *host, *stream_obj = Py_None;
    int kind, count;
    if (!PyArg_ParseTuple(args, "OOii|O:_c_loop", &device, &host, &kind, &count, &stream_obj)) return NULL;
    if (kind < 0 || kind > 3 || count < 1) {
        PyErr_SetString(PyExc_ValueError, "_c_loop: kind 0-3 (upload, download, upload_with, download_into), count >= 1");
        return NULL;
    }
    if (begin(self, "_c_loop") < 0) return NULL;
    transfer t;
    int with_host = kind < 2;
    if (transfer_get(&t, device, kind != 1 && kind != 3, "device", with_host ? host : NULL, kind == 1, "host",
                     stream_obj) < 0) {
        give(self);
        return NULL;
    }
    double *us = PyMem_Malloc((size_t)count * sizeof *us);
    pinstage_status s = us ? PINSTAGE_SUCCESS : PINSTAGE_ERROR_OUT_OF_MEMORY;
    Py_BEGIN_ALLOW_THREADS for (int i = 0; i < count && !s; i++) {
        const void *view;
        double start = now_us();
        switch (kind) {
        case 0: s = pinstage_buffer_upload(self->buf, t.devbuf, t.host.view.buf, t.device.nbytes, t.stream); break;
        case 1: s = pinstage_buffer_download(self->buf, t.host.view.buf, t.device.nbytes, t.devbuf, t.stream); break;
        case 2: s = pinstage_buffer_upload_with(self->buf, t.devbuf, t.device.nbytes, t.stream, no_fill, NULL); break;
        default: s = pinstage_buffer_download_into(self->buf, t.devbuf, t.device.nbytes, t.stream, &view); break;
        }
        us[i] = now_us() - start;
    }
    Py_END_ALLOW_THREADS
    transfer_release(&t);
    give(self);
    PyObject *list = NULL;
    if (!s && (list = PyList_New(count)))
        for (int i = 0; i < count; i++) PyList_SET_ITEM(list, i, PyFloat_FromDouble(us[i]));
    PyMem_Free(us);
    if (s) return us ? pspy_raise(s) : PyErr_NoMemory();
    return list;
}

static PyObject *Buffer_repr(PsPy_Buffer *self) {
    if (!self->buf) return PyUnicode_FromString("<pinstage.Buffer closed>");
    return PyUnicode_FromFormat("<pinstage.Buffer capacity=%zu>", pinstage_buffer_capacity(self->buf));
}

/* ---- The type ------------------------------------------------------------------------------------ */

static PyMethodDef Buffer_methods[] = {
    {"upload", (PyCFunction)(void (*)(void))Buffer_upload, METH_FASTCALL | METH_KEYWORDS,
     "upload(dst, src, stream=None)\n--\n\n"
     "Uploads host memory `src` (anything with the buffer protocol, C-contiguous; read-only is fine) to "
     "device memory `dst` (a pinstage.DeviceArray, a PyTorch CUDA tensor, a CuPy array: anything with "
     "__cuda_array_interface__ or __dlpack__, C-contiguous) of the same size and element type. Ordered "
     "after the work queued on `stream`; returns once the data has landed, so `src` may be reused. Page-locked "
     "`src` (a pinned tensor) goes by one DMA; pageable memory by the route the profile and recent "
     "transfers choose. The GIL is released meanwhile."},
    {"download", (PyCFunction)(void (*)(void))Buffer_download, METH_FASTCALL | METH_KEYWORDS,
     "download(dst, src, stream=None)\n--\n\n"
     "Downloads device memory `src` into writable host memory `dst` of the same size and element type; the "
     "mirror of upload. Sees the results of work queued on `stream`; returns once `dst` holds the data."},
    {"upload_with", (PyCFunction)(void (*)(void))Buffer_upload_with, METH_FASTCALL | METH_KEYWORDS,
     "upload_with(dst, fill, stream=None)\n--\n\n"
     "Calls fill(view) with a writable memoryview of the buffer's pinned memory, shaped like `dst`, then "
     "uploads it: what fill writes is what the DMA reads, with no copy. The view ends when fill returns (use "
     "it inside fill only). If fill raises, the exception propagates after the copy; `dst` then holds "
     "whatever the pinned memory held."},
    {"download_into", (PyCFunction)(void (*)(void))Buffer_download_into, METH_FASTCALL | METH_KEYWORDS,
     "download_into(src, stream=None) -> memoryview\n--\n\n"
     "Downloads `src` into the buffer's pinned memory and returns a read-only memoryview of it, shaped like "
     "`src`: no copy out. The view is valid until the next call on this buffer, which ends it (it then raises "
     "ValueError); if something still holds its memory then (an array made from it), that call raises "
     "BufferError instead. Use it as `with buf.download_into(t) as view: ...`."},
    {"reserve", (PyCFunction)Buffer_reserve, METH_O,
     "reserve(nbytes)\n--\n\nMakes sure at least `nbytes` are pinned, so the allocation stays out of a loop. "
     "Grow-only."},
    {"shrink_to_fit", (PyCFunction)Buffer_shrink_to_fit, METH_NOARGS,
     "shrink_to_fit()\n--\n\nReleases the pinned memory (capacity 0); the next transfer pins again."},
    {"stats", (PyCFunction)Buffer_stats, METH_NOARGS,
     "stats() -> pinstage.Stats\n--\n\nThe buffer's counters (see pinstage_stats in pinstage.h)."},
    {"placement", (PyCFunction)Buffer_placement, METH_NOARGS,
     "placement() -> pinstage.Placement\n--\n\nThe device it is bound to, that device's NUMA node, the node its "
     "pinned memory is placed on and where its pages are (asked of the kernel), the node of its copy threads, "
     "its pinned bytes (see pinstage_buffer_get_placement)."},
    {"close", (PyCFunction)Buffer_close, METH_NOARGS,
     "close()\n--\n\nReleases the pinned memory and the buffer; later calls raise ValueError. Views still in "
     "use make it raise BufferError. Closing twice is fine."},
    {"__enter__", Buffer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Buffer_exit, METH_VARARGS, NULL},
    {"_c_loop", (PyCFunction)Buffer_c_loop, METH_VARARGS,
     "_c_loop(device, host, kind, count, stream=None) -> [us, ...]\n--\n\nFor benchmarks: the transfer (kind 0 "
     "upload, 1 download, 2 upload_with writing nothing, 3 download_into) `count` times from C, each call's "
     "time: what a C program pays, beside which the module's own cost shows."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Buffer_getset[] = {
    {"capacity", (getter)Buffer_get_capacity, NULL, "Pinned bytes held (0 before first use).", NULL},
    {"closed", (getter)Buffer_get_closed, NULL, "Whether close() has run.", NULL},
    {"threshold", (getter)Buffer_get_threshold, (setter)Buffer_set_threshold,
     "None (the profile chooses every route), or the seed's threshold in bytes: larger pageable transfers take "
     "the driver's pageable path, the others are staged.",
     NULL},
    {"profile", (getter)Buffer_get_profile, (setter)Buffer_set_profile,
     "The buffer's own pinstage.Profile, or None (the process default).", NULL},
    {"strict", (getter)Buffer_get_strict, (setter)Buffer_set_strict,
     "True: fail when no pinned memory can be had, instead of taking the driver's pageable path.", NULL},
    {"adaptive", (getter)Buffer_get_adaptive, (setter)Buffer_set_adaptive,
     "False: follow the profile alone, not what recent transfers achieved.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PsPy_BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage.Buffer",
    .tp_basicsize = sizeof(PsPy_Buffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Buffer_init,
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_repr = (reprfunc)Buffer_repr,
    .tp_methods = Buffer_methods,
    .tp_getset = Buffer_getset,
    .tp_doc = "Buffer(capacity=0, *, threshold=None, profile=None, strict=False, adaptive=True, device=-1, "
              "numa_node=None)\n--\n\n"
              "A staging buffer: one reused, grow-on-demand page-locked host allocation through which uploads "
              "and downloads go. `capacity` pins that many bytes now. With `device` (0 or more) the buffer is "
              "bound to that GPU (pinstage_buffer_bind): each call runs in its primary context whatever this "
              "thread's current context is, so it takes that GPU's memory from any thread, and its pinned memory "
              "and copy threads go on the GPU's NUMA node where the host has several (`numa_node`: None for the "
              "GPU's, -1 for no placement, or a node); placement() says where they are. One buffer may be "
              "shared by threads: they take turns. Use `with pinstage.Buffer() as buf:` to free it "
              "deterministically.",
};
