/* SPDX-License-Identifier: MIT */
/* The pinstage extension module: what its files share.
 *
 *   module.c    the module, its functions, pinstage.Error
 *   interop.c   objects in: host memory (buffer protocol), device memory
 *               (pinstage.DeviceArray, __cuda_array_interface__, DLPack),
 *               streams; the CUDA context a call runs in
 *   views.c     memoryviews of pinned memory, and ending them before that
 *               memory is reused
 *   buffer.c    pinstage.Buffer
 *   ring.c      pinstage.Ring, pinstage.Ticket
 *   devarray.c  pinstage.DeviceArray
 *   profile.c   pinstage.Profile
 *   stream.c    pinstage.Stream
 * Every transfer releases the GIL; every object has a lock, so one object
 * may be shared by threads (they take turns). */
#ifndef PINSTAGE_PY_H
#define PINSTAGE_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include "pinstage.h"

/* ---- Errors ------------------------------------------------------------------------- */

extern PyObject *PsPy_Error; /* pinstage.Error */

/* Raises pinstage.Error for a failed library call: status, its name and the
 * library's message. Returns NULL. */
PyObject *pspy_raise(pinstage_status status);

/* Parses a METH_FASTCALL | METH_KEYWORDS call: out[i] gets the argument
 * named names[i] (NULL-terminated), by position or keyword; the first
 * `required` must be given. Raises TypeError and returns -1 otherwise. */
int pspy_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int required, PyObject **out);

/* ---- The driver and the context a call runs in --------------------------------------- */

typedef int CUdevice_py;

/* Loads the driver (if needed) and the entry points the module calls
 * itself. Raises and returns -1 on failure. */
int pspy_driver(void);

/* Makes sure a CUDA context is current on this thread: if none is, the
 * primary context of `device` (retained once per process) becomes current.
 * Raises and returns -1 on failure. */
int pspy_context(int device);

/* The device of the current context, or -1 (no context). */
int pspy_current_device(void);

/* For a Buffer or Ring bound to `device`: its primary context current for
 * the whole call (the objects given are resolved and checked in it), the
 * caller's saved in *saved and given back by pspy_context_pop. Raises and
 * returns -1 on failure (nothing changed). */
int pspy_context_push(int device, void **saved);
void pspy_context_pop(void *saved);

/* A binding from the constructors' `device` and `numa_node` arguments:
 * numa_node None is the device's node, -1 none, else that node. */
int pspy_binding(int device, PyObject *numa_node, pinstage_binding *out);

/* A pinstage.Placement from the library's. */
PyObject *pspy_placement_new(const pinstage_placement *p);

/* ---- Streams -------------------------------------------------------------------------- */

/* None (the legacy default stream), an int handle, an object with
 * `cuda_stream` (PyTorch, CuPy) or `__cuda_stream__` (the CUDA Python
 * protocol). Raises TypeError / ValueError and returns -1 otherwise. */
int pspy_stream(PyObject *obj, CUstream *out);

/* ---- Host memory -------------------------------------------------------------------- */

typedef struct {
    Py_buffer view;
    int held;
    char kind;        /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'c' complex, 0: raw bytes */
    Py_ssize_t itemsize;
} pspy_host;

/* C-contiguous host memory from the buffer protocol; `writable` for
 * downloads. Raises TypeError / ValueError and returns -1 otherwise. */
int pspy_host_get(PyObject *obj, int writable, const char *what, pspy_host *out);
void pspy_host_release(pspy_host *h);

/* ---- Device memory -------------------------------------------------------------------- */

#define PSPY_MAX_DIMS 32

typedef struct {
    CUdeviceptr ptr;
    size_t nbytes;
    size_t itemsize;
    char kind;             /* as for host memory; 'B' bfloat16 */
    int device;            /* -1: unknown */
    int readonly;
    int ndim;
    Py_ssize_t shape[PSPY_MAX_DIMS];
    char format[4];        /* the struct format a view of it uses ("f", "B", ...) */
    /* __cuda_array_interface__'s stream: work there must finish before a
     * transfer touches the memory. 0: none given. */
    CUstream producer_stream;
    int has_producer_stream;
    void *dlpack;          /* a DLManagedTensor to give back, NULL if none */
    PyObject *keep;        /* a reference held for the call */
} pspy_device;

/* Device memory from a pinstage.DeviceArray, __cuda_array_interface__ (v2,
 * v3) or DLPack (__dlpack__ / __dlpack_device__; `stream` is the stream the
 * transfer runs on, passed to the producer). C-contiguous only. Raises and
 * returns -1 otherwise. */
int pspy_device_get(PyObject *obj, int writable, const char *what, CUstream stream, pspy_device *out);
void pspy_device_release(pspy_device *d);

/* Makes `stream` wait for the producer stream __cuda_array_interface__
 * named (an event recorded on it, then cuStreamWaitEvent); the GIL held.
 * Raises pinstage.Error and returns the status on failure, else 0. */
pinstage_status pspy_order_after_producer(const pspy_device *d, CUstream stream);

/* Checks host and device memory against each other (size, element type),
 * raising ValueError / TypeError; 0 when they fit. */
int pspy_check_pair(const pspy_host *h, const pspy_device *d, const char *host_what, const char *device_what);

/* The device memory as a pinstage_devbuf of bytes, for one call. */
pinstage_status pspy_devbuf(const pspy_device *d, pinstage_devbuf **out);

/* ---- Object locks ---------------------------------------------------------------------- */

/* One thread at a time per object; the GIL is released while waiting. A
 * thread calling back into the object it holds (from a fill callback) is
 * refused, not deadlocked. */
typedef struct {
    PyThread_type_lock lock;
    unsigned long owner; /* thread holding it; 0: none */
} pspy_lock;

int pspy_lock_init(pspy_lock *l);
void pspy_lock_free(pspy_lock *l);
/* Raises RuntimeError and returns -1 on re-entry. */
int pspy_lock_take(pspy_lock *l, const char *what);
void pspy_lock_give(pspy_lock *l);

/* ---- Views of pinned memory ------------------------------------------------------------- */

/* The memoryviews an object handed out over its pinned memory: all are
 * ended (memoryview.release) before a call reuses or frees that memory; one
 * that cannot be ended (an array made from it is alive) makes the call
 * raise BufferError and do nothing. */
typedef struct {
    PyObject **views;       /* weak references to the memoryviews */
    Py_ssize_t count, cap;
    Py_ssize_t exports;     /* buffers exported from the views' memory now */
} pspy_views;

/* A memoryview over `len` bytes at `ptr` shaped like `d` (1-D bytes when d
 * is NULL), remembered in `set`. The view keeps `owner` (the object whose
 * pinned memory it shows, and whose member `set` is) alive. */
PyObject *pspy_view_new(pspy_views *set, PyObject *owner, void *ptr, size_t len, const pspy_device *d,
                        int readonly);
/* Ends every view in `set`: 0, or -1 with BufferError raised. */
int pspy_views_end(pspy_views *set, const char *what);
/* Ends one view if it can be ended now (else the next call tries again). */
void pspy_view_try_end(PyObject *view);
/* upload_with's callback for a Python fill: a writable view of the pinned
 * memory, with the GIL taken for the call; an exception is kept for the
 * caller to raise once the GIL is its again. */
typedef struct {
    PyObject *owner, *fill;
    pspy_views *views;
    const pspy_device *device;
    PyObject *error_type, *error_value, *error_traceback;
} pspy_fill_call;
void pspy_call_fill(void *dst, size_t n, void *user);

/* Frees the set (its views are all gone: each kept its owner alive). */
void pspy_views_clear(pspy_views *set);

/* ---- Types ----------------------------------------------------------------------------- */

extern PyTypeObject PsPy_BufferType;
extern PyTypeObject PsPy_RingType;
extern PyTypeObject PsPy_TicketType;
extern PyTypeObject PsPy_DeviceArrayType;
extern PyTypeObject PsPy_ProfileType;
extern PyTypeObject PsPy_StreamType;
extern PyTypeObject PsPy_PinnedType; /* the exporter behind the views */

extern PyTypeObject *PsPy_StatsType;
extern PyTypeObject *PsPy_RingStatsType;

typedef struct {
    PyObject_HEAD
    pinstage_devbuf *buf; /* NULL once freed */
    int device;
    int ndim;
    Py_ssize_t shape[PSPY_MAX_DIMS];
    char typestr[8];
    size_t itemsize;
    char kind;
} PsPy_DeviceArray;

typedef struct {
    PyObject_HEAD
    pinstage_profile *profile;
} PsPy_Profile;

int pspy_stats_types_init(void);
int pspy_devarray_fill(PsPy_DeviceArray *a, pspy_device *out);

#endif
