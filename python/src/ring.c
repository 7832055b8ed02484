/* SPDX-License-Identifier: MIT */
/* pinstage.Ring and pinstage.Ticket: pinstage_ring_* for Python objects.
 *
 * The ring's calls return before their copies land, so the device memory
 * they name must outlive them: the ring keeps a reference to the device
 * objects of its recent copies (twice its slot count) and drops them all
 * once they are known to have landed (synchronize, close). A view a ticket
 * returned shows a slot the ring may hand out again at its next enqueue, so
 * every enqueue first ends the views it gave (collect, use, then enqueue the
 * next; as the ring's frame pipeline does). */
#include <string.h>

#include "pinstage_py.h"

typedef struct {
    PyObject_HEAD
    pinstage_ring *ring; /* NULL once closed */
    pspy_lock lock;
    pspy_views views;
    int device;
    int bound;   /* bound to `device` (pinstage_ring_bind) */
    void *saved; /* a bound ring's call: the caller's context, given back at its end */
    int pushed;
    pspy_device *keep; /* device memory of recent copies, oldest first */
    Py_ssize_t nkeep, capkeep;
} PsPy_Ring;

typedef struct {
    PyObject_HEAD
    PsPy_Ring *ring;
    pinstage_ticket id;
    pspy_device shape; /* the source's shape and element type (no references) */
    PyObject *view;    /* weak reference to the view handed out, or NULL */
    int ended;
} PsPy_Ticket;

static PyObject *closed(const char *what) {
    PyErr_Format(PyExc_ValueError, "pinstage.Ring.%s: the ring is closed", what);
    return NULL;
}

/* Ends a call: the caller's context back (a bound ring's call), the lock. */
static void give(PsPy_Ring *self) {
    if (self->pushed) pspy_context_pop(self->saved);
    self->pushed = 0;
    pspy_lock_give(&self->lock);
}

/* Takes the lock (and ends the views); a bound ring's call runs in its
 * device's context. */
static int begin(PsPy_Ring *self, const char *what, int ends_views) {
    if (!self->ring) return closed(what), -1;
    if (pspy_lock_take(&self->lock, what) < 0) return -1;
    if (!self->ring) {
        give(self);
        return closed(what), -1;
    }
    if (ends_views && pspy_views_end(&self->views, what) < 0) {
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

static void drop_kept(PsPy_Ring *self) {
    for (Py_ssize_t i = 0; i < self->nkeep; i++) pspy_device_release(&self->keep[i]);
    self->nkeep = 0;
}

/* Takes over `d`'s references until its copy is known to have landed. */
static void keep(PsPy_Ring *self, pspy_device *d) {
    if (self->nkeep == self->capkeep) {
        pspy_device_release(&self->keep[0]);
        memmove(self->keep, self->keep + 1, (size_t)(self->nkeep - 1) * sizeof *self->keep);
        self->nkeep--;
    }
    self->keep[self->nkeep++] = *d;
    memset(d, 0, sizeof *d);
}

static int Ring_init(PsPy_Ring *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"slots", "nonblocking", "device", "numa_node", NULL};
    unsigned slots = 4;
    int nonblocking = 0, device = -1;
    PyObject *numa_node = Py_None;
    pinstage_binding binding;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|I$piO:Ring", names, &slots, &nonblocking, &device, &numa_node))
        return -1;
    if (device < 0 && numa_node != Py_None) {
        PyErr_SetString(PyExc_ValueError, "numa_node is for a Ring bound to a device: give device= too");
        return -1;
    }
    if (device >= 0 && pspy_binding(device, numa_node, &binding) < 0) return -1;
    if (self->ring) {
        PyErr_SetString(PyExc_RuntimeError, "pinstage.Ring is already initialized");
        return -1;
    }
    if (pspy_lock_init(&self->lock) < 0) return -1;
    self->device = device;
    pinstage_status s = pinstage_ring_create(&self->ring, slots, nonblocking ? PINSTAGE_RING_NONBLOCKING : 0);
    if (s) return pspy_raise(s), -1;
    if (device >= 0 && (s = pinstage_ring_bind(self->ring, &binding))) {
        pinstage_ring_free(self->ring);
        self->ring = NULL;
        return pspy_raise(s), -1;
    }
    self->bound = device >= 0;
    self->capkeep = 2 * (Py_ssize_t)slots + 2;
    self->keep = PyMem_Calloc((size_t)self->capkeep, sizeof *self->keep);
    if (!self->keep) return PyErr_NoMemory(), -1;
    return 0;
}

static pinstage_status free_ring(PsPy_Ring *self) {
    pinstage_ring *ring = self->ring;
    self->ring = NULL;
    if (!ring) return PINSTAGE_SUCCESS;
    if (pspy_context(self->device) < 0) PyErr_Clear();
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_ring_free(ring); /* waits for every copy */
    Py_END_ALLOW_THREADS
    drop_kept(self);
    return s;
}

static void Ring_dealloc(PsPy_Ring *self) {
    pspy_views_clear(&self->views);
    if (free_ring(self)) PyErr_Clear();
    drop_kept(self);
    PyMem_Free(self->keep);
    pspy_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *finish(PsPy_Ring *self, pinstage_status s) {
    give(self);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *Ring_close(PsPy_Ring *self, PyObject *unused) {
    (void)unused;
    if (!self->ring) Py_RETURN_NONE;
    if (begin(self, "close", 1) < 0) return NULL;
    return finish(self, free_ring(self));
}

static PyObject *Ring_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    if (!((PsPy_Ring *)self)->ring) return closed("__enter__");
    return Py_NewRef(self);
}

static PyObject *Ring_exit(PsPy_Ring *self, PyObject *args) {
    (void)args;
    PyObject *r = Ring_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *Ring_reserve(PsPy_Ring *self, PyObject *arg) {
    Py_ssize_t bytes = PyLong_AsSsize_t(arg);
    if (bytes == -1 && PyErr_Occurred()) return NULL;
    if (bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "reserve: bytes must be positive");
        return NULL;
    }
    if (begin(self, "reserve", 1) < 0) return NULL;
    if (pspy_context(self->device) < 0) {
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_ring_reserve(self->ring, (size_t)bytes);
    Py_END_ALLOW_THREADS
    return finish(self, s);
}

static PyObject *Ring_synchronize(PsPy_Ring *self, PyObject *unused) {
    (void)unused;
    if (begin(self, "synchronize", 0) < 0) return NULL;
    if (pspy_context(self->device) < 0) {
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_ring_synchronize(self->ring);
    Py_END_ALLOW_THREADS
    if (!s) drop_kept(self);
    return finish(self, s);
}

static PyObject *Ring_placement(PsPy_Ring *self, PyObject *unused) {
    (void)unused;
    if (!self->ring) return closed("placement");
    pinstage_placement where;
    pinstage_status s = pinstage_ring_get_placement(self->ring, &where);
    return s ? pspy_raise(s) : pspy_placement_new(&where);
}

static PyObject *Ring_stats(PsPy_Ring *self, PyObject *unused) {
    (void)unused;
    pinstage_ring_stats st;
    pinstage_ring_get_stats(self->ring, &st);
    PyObject *r = PyStructSequence_New(PsPy_RingStatsType);
    if (!r) return NULL;
    unsigned long long v[] = {st.uploads,           st.downloads,     st.bytes_uploaded, st.bytes_downloaded,
                              st.slot_waits,        st.slot_wait_ns,  st.would_block,    st.pinned_allocations,
                              st.pin_time_ns,       st.pinned_bytes,  st.peak_pinned_bytes, st.retired_blocks,
                              st.release_failures};
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

/* Device memory, the stream, and the producer's work ordered before ours. */
static int device_get(PsPy_Ring *self, PyObject *obj, int written, const char *what, PyObject *stream_obj,
                      CUstream *stream, pspy_device *d, pinstage_devbuf **devbuf) {
    (void)self;
    if (pspy_stream(stream_obj, stream) < 0 || pspy_device_get(obj, written, what, *stream, d) < 0) return -1;
    pinstage_status s = pspy_devbuf(d, devbuf);
    if (s) pspy_raise(s);
    if (s || pspy_order_after_producer(d, *stream)) {
        pspy_device_release(d);
        return -1;
    }
    return 0;
}

static PyObject *Ring_upload_async(PsPy_Ring *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dst", "src", "stream", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    if (pspy_args("upload_async", args, nargs, kwnames, names, 2, a) < 0 || begin(self, "upload_async", 1) < 0)
        return NULL;
    pspy_host h;
    pspy_device d;
    pinstage_devbuf *devbuf = NULL;
    CUstream stream;
    memset(&d, 0, sizeof d);
    if (pspy_host_get(a[1], 0, "src", &h) < 0) {
        give(self);
        return NULL;
    }
    if (device_get(self, a[0], 1, "dst", a[2], &stream, &d, &devbuf) < 0 || pspy_check_pair(&h, &d, "src", "dst") < 0) {
        pspy_host_release(&h);
        pspy_device_release(&d);
        pinstage_devbuf_free(devbuf);
        give(self);
        return NULL;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_ring_upload_async(self->ring, devbuf, h.view.buf, d.nbytes, stream);
    Py_END_ALLOW_THREADS
    pinstage_devbuf_free(devbuf);
    pspy_host_release(&h); /* copied into the slot already */
    if (!s)
        keep(self, &d);
    else
        pspy_device_release(&d);
    return finish(self, s);
}

static PyObject *Ring_upload_with_async(PsPy_Ring *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
    static const char *const names[] = {"dst", "fill", "stream", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    if (pspy_args("upload_with_async", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!PyCallable_Check(a[1])) {
        PyErr_Format(PyExc_TypeError, "upload_with_async: fill must be callable; got %.100s", Py_TYPE(a[1])->tp_name);
        return NULL;
    }
    if (begin(self, "upload_with_async", 1) < 0) return NULL;
    pspy_device d;
    pinstage_devbuf *devbuf = NULL;
    CUstream stream;
    memset(&d, 0, sizeof d);
    if (device_get(self, a[0], 1, "dst", a[2], &stream, &d, &devbuf) < 0) {
        give(self);
        return NULL;
    }
    pspy_fill_call f = {(PyObject *)self, a[1], &self->views, &d, NULL, NULL, NULL};
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_ring_upload_with_async(self->ring, devbuf, d.nbytes, stream, pspy_call_fill, &f);
    Py_END_ALLOW_THREADS
    pinstage_devbuf_free(devbuf);
    if (!s)
        keep(self, &d);
    else
        pspy_device_release(&d);
    give(self);
    if (f.error_type) {
        PyErr_Restore(f.error_type, f.error_value, f.error_traceback);
        return NULL;
    }
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *Ring_download_async(PsPy_Ring *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"src", "stream", NULL};
    PyObject *a[2] = {NULL, NULL};
    if (pspy_args("download_async", args, nargs, kwnames, names, 1, a) < 0 || begin(self, "download_async", 1) < 0)
        return NULL;
    pspy_device d;
    pinstage_devbuf *devbuf = NULL;
    CUstream stream;
    memset(&d, 0, sizeof d);
    if (device_get(self, a[0], 0, "src", a[1], &stream, &d, &devbuf) < 0) {
        give(self);
        return NULL;
    }
    PsPy_Ticket *t = PyObject_New(PsPy_Ticket, &PsPy_TicketType);
    if (!t) {
        pinstage_devbuf_free(devbuf);
        pspy_device_release(&d);
        give(self);
        return NULL;
    }
    t->ring = (PsPy_Ring *)Py_NewRef(self);
    t->id = 0;
    t->view = NULL;
    t->ended = 1;
    t->shape = d;
    t->shape.keep = NULL;
    t->shape.dlpack = NULL;
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_ring_download_async(self->ring, devbuf, d.nbytes, stream, &t->id);
    Py_END_ALLOW_THREADS
    pinstage_devbuf_free(devbuf);
    if (!s) {
        t->ended = 0;
        keep(self, &d);
    } else {
        pspy_device_release(&d);
    }
    give(self);
    if (s) {
        Py_DECREF(t);
        return pspy_raise(s);
    }
    return (PyObject *)t;
}

static PyObject *Ring_repr(PsPy_Ring *self) {
    if (!self->ring) return PyUnicode_FromString("<pinstage.Ring closed>");
    pinstage_ring_stats st;
    pinstage_ring_get_stats(self->ring, &st);
    return PyUnicode_FromFormat("<pinstage.Ring pinned_bytes=%zu>", st.pinned_bytes);
}

static PyMethodDef Ring_methods[] = {
    {"upload_async", (PyCFunction)(void (*)(void))Ring_upload_async, METH_FASTCALL | METH_KEYWORDS,
     "upload_async(dst, src, stream=None)\n--\n\nCopies host memory `src` into a slot and enqueues its upload to "
     "`dst` on `stream`; returns before the copy lands (`src` may be reused at once; `dst` must stay allocated "
     "until the copy lands: the ring keeps a reference to it meanwhile)."},
    {"upload_with_async", (PyCFunction)(void (*)(void))Ring_upload_with_async, METH_FASTCALL | METH_KEYWORDS,
     "upload_with_async(dst, fill, stream=None)\n--\n\nfill(view) writes the frame straight into a slot (a "
     "writable memoryview, ended when fill returns), then its upload is enqueued; returns before it lands."},
    {"download_async", (PyCFunction)(void (*)(void))Ring_download_async, METH_FASTCALL | METH_KEYWORDS,
     "download_async(src, stream=None) -> Ticket\n--\n\nEnqueues a download of `src` into a slot, ordered after "
     "the work queued on `stream`; returns a Ticket at once."},
    {"synchronize", (PyCFunction)Ring_synchronize, METH_NOARGS,
     "synchronize()\n--\n\nWaits until every copy the ring enqueued has landed; tickets stay outstanding."},
    {"reserve", (PyCFunction)Ring_reserve, METH_O,
     "reserve(nbytes)\n--\n\nEvery slot holds at least nbytes of pinned memory (grow-only)."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "stats() -> pinstage.RingStats\n--\n\nThe ring's counters."},
    {"placement", (PyCFunction)Ring_placement, METH_NOARGS,
     "placement() -> pinstage.Placement\n--\n\nAs Buffer.placement, over the ring's slots."},
    {"close", (PyCFunction)Ring_close, METH_NOARGS,
     "close()\n--\n\nWaits for every copy, then frees the slots; uncollected downloads are discarded."},
    {"__enter__", Ring_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Ring_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject PsPy_RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage.Ring",
    .tp_basicsize = sizeof(PsPy_Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ring_init,
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_repr = (reprfunc)Ring_repr,
    .tp_methods = Ring_methods,
    .tp_doc = "Ring(slots=4, *, nonblocking=False, device=-1, numa_node=None)\n--\n\n"
              "The asynchronous ring: uploads and downloads that return before their copies land, through "
              "`slots` pinned slots each reused only once its copy has. With nonblocking=True an upload whose "
              "slot is busy raises pinstage.Error (CUDA_ERROR_NOT_READY) instead of waiting. A view a Ticket "
              "returns is valid until the ring's next enqueue (collect, use, then enqueue the next). `device` "
              "and `numa_node` bind it to a GPU as for a Buffer.",
};

/* ---- Tickets -------------------------------------------------------------------------------- */

/* wait / poll: the view, or NULL (poll: Py_None) while in flight. */
static PyObject *collect(PsPy_Ticket *self, int wait) {
    PsPy_Ring *ring = self->ring;
    const char *what = wait ? "wait" : "poll";
    if (self->ended) {
        PyErr_Format(PyExc_ValueError, "Ticket.%s: the ticket was released or its download failed", what);
        return NULL;
    }
    if (begin(ring, what, 0) < 0) return NULL;
    if (pspy_context(ring->device) < 0) {
        give(ring);
        return NULL;
    }
    const void *pinned = NULL;
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = wait ? pinstage_ring_wait(ring->ring, self->id, &pinned)
                                    : pinstage_ring_poll(ring->ring, self->id, &pinned);
    Py_END_ALLOW_THREADS
    PyObject *view = NULL;
    if (!s) {
        /* Collected again: the same memory, a view of its own. */
        view = pspy_view_new(&ring->views, (PyObject *)ring, (void *)pinned, self->shape.nbytes, &self->shape, 1);
        if (view) {
            Py_XSETREF(self->view, PyWeakref_NewRef(view, NULL));
            if (!self->view) Py_CLEAR(view);
        }
    } else if (s != PINSTAGE_ERROR_NOT_READY) {
        self->ended = 1; /* a failed download ends its ticket */
    }
    give(ring);
    if (s == PINSTAGE_ERROR_NOT_READY && !wait) Py_RETURN_NONE;
    if (s) return pspy_raise(s);
    return view;
}

static PyObject *Ticket_wait(PsPy_Ticket *self, PyObject *unused) {
    (void)unused;
    return collect(self, 1);
}

static PyObject *Ticket_poll(PsPy_Ticket *self, PyObject *unused) {
    (void)unused;
    return collect(self, 0);
}

static PyObject *Ticket_release(PsPy_Ticket *self, PyObject *unused) {
    (void)unused;
    if (self->ended) Py_RETURN_NONE;
    PsPy_Ring *ring = self->ring;
    if (begin(ring, "release", 0) < 0) return NULL;
    /* Its view ends now if it can; if something still holds it, the ring's
     * next enqueue (the first call that may reuse the slot) refuses. */
    if (self->view) {
        PyObject *view = PyWeakref_GetObject(self->view);
        if (view != Py_None) {
            Py_INCREF(view);
            pspy_view_try_end(view);
            Py_DECREF(view);
        }
    }
    pinstage_status s = pinstage_ring_release(ring->ring, self->id);
    self->ended = 1;
    give(ring);
    /* A ticket the ring no longer knows (its slot went to a later copy) is
     * ended already. */
    if (s && s != PINSTAGE_ERROR_INVALID_VALUE) return pspy_raise(s);
    Py_RETURN_NONE;
}

static void Ticket_dealloc(PsPy_Ticket *self) {
    PsPy_Ring *ring = self->ring;
    if (!self->ended && ring && ring->ring && ring->lock.owner != PyThread_get_thread_ident()) {
        if (pspy_lock_take(&ring->lock, "Ticket") == 0) {
            if (ring->ring) pinstage_ring_release(ring->ring, self->id);
            give(ring);
        } else {
            PyErr_Clear();
        }
    }
    Py_XDECREF(self->view);
    Py_XDECREF((PyObject *)ring);
    PyObject_Free(self);
}

static PyObject *Ticket_get_id(PsPy_Ticket *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->id);
}

static PyObject *Ticket_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *Ticket_exit(PsPy_Ticket *self, PyObject *args) {
    (void)args;
    PyObject *r = Ticket_release(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyMethodDef Ticket_methods[] = {
    {"wait", (PyCFunction)Ticket_wait, METH_NOARGS,
     "wait() -> memoryview\n--\n\nWaits until the download has landed; a read-only view of its bytes, shaped "
     "like the source, valid until the ring's next enqueue or release()."},
    {"poll", (PyCFunction)Ticket_poll, METH_NOARGS,
     "poll() -> memoryview or None\n--\n\nAs wait(), without waiting: None while the copy is in flight."},
    {"release", (PyCFunction)Ticket_release, METH_NOARGS,
     "release()\n--\n\nEnds the ticket (and its view): before completion the download is discarded."},
    {"__enter__", Ticket_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Ticket_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ticket_getset[] = {
    {"id", (getter)Ticket_get_id, NULL, "The ring's ticket number (never 0).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PsPy_TicketType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pinstage.Ticket",
    .tp_basicsize = sizeof(PsPy_Ticket),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Ticket_dealloc,
    .tp_methods = Ticket_methods,
    .tp_getset = Ticket_getset,
    .tp_doc = "One Ring.download_async: wait() / poll() for its bytes, release() to end it. A ticket that goes "
              "away uncollected is released.",
};
