/* SPDX-License-Identifier: MIT */
/* Memoryviews of pinned memory, and their end.
 *
 * download_into's result and the view a fill callback writes through are
 * memoryviews of the object's own pinned memory, which its next call
 * reuses. So every view an object hands out is remembered (weakly), and
 * before a call reuses or frees that memory each one is ended
 * (memoryview.release): from then on it raises ValueError instead of
 * showing other bytes. A view that cannot be ended because something still
 * holds its memory (an array made with numpy.frombuffer, say) makes the
 * call raise BufferError and do nothing, as bytearray refuses to resize
 * while exported. Every view keeps its owner alive, so the memory behind a
 * view is never freed under it. */
#include <string.h>

#include "pinstage_py.h"

/* The exporter behind a view: the pinned bytes, with the view's shape. */
typedef struct {
    PyObject_HEAD
    PyObject *owner; /* the Buffer or Ring: alive while this is */
    pspy_views *set; /* the owner's, counting exports */
    void *ptr;
    Py_ssize_t len, itemsize;
    int readonly, ndim;
    Py_ssize_t shape[PSPY_MAX_DIMS], strides[PSPY_MAX_DIMS];
    char format[4];
} pinned_exporter;

static int pinned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    pinned_exporter *e = (pinned_exporter *)self;
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && e->readonly) {
        PyErr_SetString(PyExc_BufferError, "this view of pinned memory is read-only");
        view->obj = NULL;
        return -1;
    }
    view->obj = Py_NewRef(self);
    view->buf = e->ptr;
    view->len = e->len;
    view->readonly = e->readonly;
    view->itemsize = e->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? e->format : NULL;
    view->ndim = e->ndim;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? e->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? e->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    e->set->exports++;
    return 0;
}

static void pinned_releasebuffer(PyObject *self, Py_buffer *view) {
    (void)view;
    ((pinned_exporter *)self)->set->exports--;
}

static void pinned_dealloc(PyObject *self) {
    Py_XDECREF(((pinned_exporter *)self)->owner);
    PyObject_Free(self);
}

static PyBufferProcs pinned_as_buffer = {pinned_getbuffer, pinned_releasebuffer};

PyTypeObject PsPy_PinnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage._Pinned",
    .tp_basicsize = sizeof(pinned_exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = pinned_dealloc,
    .tp_as_buffer = &pinned_as_buffer,
    .tp_doc = "Pinned memory of a pinstage.Buffer or Ring, behind the memoryviews they hand out.",
};

PyObject *pspy_view_new(pspy_views *set, PyObject *owner, void *ptr, size_t len, const pspy_device *d,
                        int readonly) {
    if (set->count == set->cap) {
        Py_ssize_t cap = set->cap ? set->cap * 2 : 4;
        PyObject **views = PyMem_Realloc(set->views, (size_t)cap * sizeof *views);
        if (!views) return PyErr_NoMemory();
        set->views = views;
        set->cap = cap;
    }
    pinned_exporter *e = PyObject_New(pinned_exporter, &PsPy_PinnedType);
    if (!e) return NULL;
    e->owner = Py_NewRef(owner);
    e->set = set;
    e->ptr = ptr;
    e->len = (Py_ssize_t)len;
    e->readonly = readonly;
    if (d && d->format[0] && d->ndim > 0) {
        /* Shaped like the device memory, C order. */
        snprintf(e->format, sizeof e->format, "%s", d->format);
        e->itemsize = (Py_ssize_t)d->itemsize;
        e->ndim = d->ndim;
        Py_ssize_t stride = e->itemsize;
        for (int i = d->ndim - 1; i >= 0; i--) {
            e->shape[i] = d->shape[i];
            e->strides[i] = stride;
            stride *= d->shape[i];
        }
    } else {
        snprintf(e->format, sizeof e->format, "B");
        e->itemsize = 1;
        e->ndim = 1;
        e->shape[0] = (Py_ssize_t)len;
        e->strides[0] = 1;
    }
    PyObject *view = PyMemoryView_FromObject((PyObject *)e);
    Py_DECREF(e);
    if (!view) return NULL;
    PyObject *weak = PyWeakref_NewRef(view, NULL);
    if (!weak) {
        Py_DECREF(view);
        return NULL;
    }
    set->views[set->count++] = weak;
    return view;
}

/* memoryview.release(); 0 when it ended. */
static int end_view(PyObject *view) {
    PyObject *r = PyObject_CallMethod(view, "release", NULL);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

int pspy_views_end(pspy_views *set, const char *what) {
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < set->count; i++) {
        PyObject *view = PyWeakref_GetObject(set->views[i]); /* borrowed; None when gone */
        if (view != Py_None && end_view(view) < 0) {
            PyErr_Clear();
            set->views[kept++] = set->views[i]; /* still held: the next call tries again */
        } else {
            Py_DECREF(set->views[i]);
        }
    }
    set->count = kept;
    if (set->exports > 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s: this object's pinned memory is still exported %zd time(s) (e.g. an array made from the "
                     "memoryview download_into returned or a fill callback was given); delete it, or release the "
                     "view, before the next call reuses that memory",
                     what, set->exports);
        return -1;
    }
    return 0;
}

void pspy_view_try_end(PyObject *view) {
    if (end_view(view) < 0) PyErr_Clear();
}

void pspy_views_clear(pspy_views *set) {
    for (Py_ssize_t i = 0; i < set->count; i++) Py_DECREF(set->views[i]);
    PyMem_Free(set->views);
    set->views = NULL;
    set->count = set->cap = 0;
}

void pspy_call_fill(void *dst, size_t n, void *user) {
    pspy_fill_call *f = user;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *view = pspy_view_new(f->views, f->owner, dst, n, f->device, 0);
    PyObject *r = view ? PyObject_CallOneArg(f->fill, view) : NULL;
    if (r)
        Py_DECREF(r);
    else
        PyErr_Fetch(&f->error_type, &f->error_value, &f->error_traceback);
    if (view) {
        pspy_view_try_end(view); /* the DMA reads the memory next */
        Py_DECREF(view);
    }
    PyGILState_Release(gil);
}
