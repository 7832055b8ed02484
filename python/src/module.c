/* SPDX-License-Identifier: MIT */
/* The pinstage module: its functions, named tuples, constants and types.
 * The library itself is compiled into the module; the CUDA driver is loaded
 * at the first call that needs it, as in C ($PINSTAGE_DRIVER, else
 * libcuda.so.1; pinstage.driver_load(path) names another). */
#include <string.h>

#include "pinstage_py.h"

/* ---- Arguments ------------------------------------------------------------------------ */

int pspy_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
              int required, PyObject **out) {
    int n = 0;
    while (names[n]) n++;
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, n, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int found = -1;
        for (int i = 0; key && i < n; i++)
            if (!strcmp(key, names[i])) found = i;
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", fn, key ? key : "?");
            return -1;
        }
        if (out[found]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, key);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    for (int i = 0; i < required; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
            return -1;
        }
    return 0;
}

/* ---- Named tuples ---------------------------------------------------------------------- */

PyTypeObject *PsPy_StatsType, *PsPy_RingStatsType;
static PyTypeObject *DriverInfoType, *DeviceInfoType, *PoolInfoType, *RouteInfoType;

static PyStructSequence_Field stats_fields[] = {
    {"pinned_allocations", "pinned allocations made"},
    {"staged_transfers", "transfers through the buffer's pinned memory"},
    {"pageable_transfers", "upload/download handed to the driver's pageable path"},
    {"bytes_uploaded", "host to device bytes, all routes"},
    {"bytes_downloaded", "device to host bytes, all routes"},
    {"pin_time_ns", "wall time in pinned allocation and release"},
    {"peak_capacity", "largest capacity the buffer has had"},
    {"engine_transfers", "staged by the copy engine"},
    {"pinned_host_transfers", "upload/download of page-locked host memory: one DMA"},
    {"retired_blocks", "pinned blocks dropped after a failed wait"},
    {"pinned_fallbacks", "pageable path taken because no pinned memory could be had"},
    {"release_failures", "cuMemFreeHost calls the driver refused"},
    {"route_probes", "transfers that took the other route to measure it"},
    {"route_overrides", "transfers that left the profile's route because the other measured faster"},
    {NULL, NULL},
};

static PyStructSequence_Field ring_stats_fields[] = {
    {"uploads", "upload_async and upload_with_async enqueued"},
    {"downloads", "download_async enqueued"},
    {"bytes_uploaded", NULL},
    {"bytes_downloaded", NULL},
    {"slot_waits", "calls that waited for a busy slot"},
    {"slot_wait_ns", "time those waits took"},
    {"would_block", "NOT_READY refusals of a non-blocking ring"},
    {"pinned_allocations", NULL},
    {"pin_time_ns", NULL},
    {"pinned_bytes", "pinned now, all slots"},
    {"peak_pinned_bytes", NULL},
    {"retired_blocks", NULL},
    {"release_failures", NULL},
    {NULL, NULL},
};

static PyStructSequence_Field driver_info_fields[] = {
    {"path", "the library loaded"}, {"driver_version", "e.g. 13000"}, {"emulated", "pinstage's emulated driver"},
    {NULL, NULL}};
static PyStructSequence_Field device_info_fields[] = {
    {"name", NULL}, {"pci_bus_id", NULL}, {"compute_capability", "(major, minor)"}, {"multiprocessors", NULL},
    {"copy_engines", NULL}, {"numa_node", "the host NUMA node the GPU is attached to; -1: not known"},
    {NULL, NULL}};
static PyStructSequence_Field pool_info_fields[] = {
    {"workers", "configured"}, {"running", "started threads"}, {"parked", "of those, parked now"},
    {"spin_us", "how long an idle worker spins before it parks"},
    {"pools", "NUMA nodes' pools made so far, besides the process-wide one"}, {NULL, NULL}};
static PyStructSequence_Field route_info_fields[] = {
    {"adaptive", "adaptation is on, process-wide"},
    {"chosen", "ADAPT_PROFILE, ADAPT_PAGEABLE or ADAPT_STAGING"},
    {"pageable_us", "recent median time of the pageable route at this size; 0: none"},
    {"staging_us", "the same through pinned memory"},
    {"pageable_samples", NULL},
    {"staging_samples", NULL},
    {"switches", NULL},
    {"probes", NULL},
    {"engine_threads", "threads the engine's copies of this size get now, the caller included; 0: not governed"},
    {"thread_changes", NULL},
    {NULL, NULL}};

static PyStructSequence_Field placement_fields[] = {
    {"device", "the device bound; -1: unbound (the calling thread's context)"},
    {"device_node", "the NUMA node the device is attached to; -1: not known, or unbound"},
    {"memory_node", "the node its pinned memory is placed on; -1: not placed"},
    {"memory_found", "where the pages are now, asked of the kernel; -1 nothing pinned or not known, -2 several"},
    {"worker_node", "the node whose CPUs run its copy threads; -1: any CPU"},
    {"pinned_bytes", "pinned bytes it holds"},
    {NULL, NULL}};
static PyTypeObject *PlacementType;

static PyTypeObject *new_struct(const char *name, const char *doc, PyStructSequence_Field *fields) {
    int n = 0;
    while (fields[n].name) n++;
    PyStructSequence_Desc desc = {(char *)name, (char *)doc, fields, n};
    return PyStructSequence_NewType(&desc);
}

int pspy_stats_types_init(void) {
    PsPy_StatsType = new_struct("pinstage.Stats", "A Buffer's counters.", stats_fields);
    PsPy_RingStatsType = new_struct("pinstage.RingStats", "A Ring's counters.", ring_stats_fields);
    DriverInfoType = new_struct("pinstage.DriverInfo", "The driver loaded.", driver_info_fields);
    DeviceInfoType = new_struct("pinstage.DeviceInfo", "A CUDA device.", device_info_fields);
    PoolInfoType = new_struct("pinstage.PoolInfo", "The copy engine's worker pool.", pool_info_fields);
    RouteInfoType = new_struct("pinstage.RouteInfo", "What adaptation knows of a size.", route_info_fields);
    PlacementType = new_struct("pinstage.Placement", "Where a Buffer's or Ring's memory and copy threads are.",
                               placement_fields);
    return PsPy_StatsType && PsPy_RingStatsType && DriverInfoType && DeviceInfoType && PoolInfoType && RouteInfoType &&
                   PlacementType
               ? 0
               : -1;
}

static PyObject *filled(PyTypeObject *type, const char *format, ...) {
    PyObject *r = PyStructSequence_New(type);
    if (!r) return NULL;
    va_list ap;
    va_start(ap, format);
    PyObject *values = Py_VaBuildValue(format, ap);
    va_end(ap);
    if (!values) {
        Py_DECREF(r);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(values); i++)
        PyStructSequence_SET_ITEM(r, i, Py_NewRef(PyTuple_GET_ITEM(values, i)));
    Py_DECREF(values);
    return r;
}

/* ---- Functions ------------------------------------------------------------------------------ */

static PyObject *fn_driver_load(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    static char *names[] = {"path", NULL};
    PyObject *path = Py_None, *bytes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:driver_load", names, &path)) return NULL;
    if (path != Py_None && !PyUnicode_FSConverter(path, &bytes)) return NULL;
    pinstage_status s;
    const char *p = bytes ? PyBytes_AS_STRING(bytes) : NULL;
    Py_BEGIN_ALLOW_THREADS s = pinstage_driver_load(p);
    Py_END_ALLOW_THREADS
    Py_XDECREF(bytes);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *fn_driver_info(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    pinstage_driver_info info;
    pinstage_status s = pinstage_driver_get_info(&info);
    if (s) return pspy_raise(s);
    return filled(DriverInfoType, "(siO)", info.path, info.driver_version, info.emulated ? Py_True : Py_False);
}

static PyObject *fn_device_count(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    int count = 0;
    pinstage_status s = pinstage_device_count(&count);
    if (s) return pspy_raise(s);
    return PyLong_FromLong(count);
}

PyObject *pspy_placement_new(const pinstage_placement *p) {
    return filled(PlacementType, "(iiiiin)", p->device, p->device_node, p->memory_node, p->memory_found,
                  p->worker_node, (Py_ssize_t)p->pinned_bytes);
}

static PyObject *fn_device_info(PyObject *m, PyObject *args) {
    (void)m;
    int device = 0;
    if (!PyArg_ParseTuple(args, "|i:device_info", &device)) return NULL;
    pinstage_device_info info;
    pinstage_status s = pinstage_device_get_info(device, &info);
    if (s) return pspy_raise(s);
    return filled(DeviceInfoType, "(ss(ii)iii)", info.name, info.pci_bus_id, info.compute_major, info.compute_minor,
                  info.multiprocessors, info.copy_engines, info.numa_node);
}

static PyObject *fn_context_init(PyObject *m, PyObject *args) {
    (void)m;
    int device = 0;
    if (!PyArg_ParseTuple(args, "|i:context_init", &device)) return NULL;
    pinstage_status s = pinstage_context_init(device);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *fn_status_name(PyObject *m, PyObject *arg) {
    (void)m;
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(pinstage_status_name((pinstage_status)code));
}

static PyObject *fn_set_pinned_limit(PyObject *m, PyObject *arg) {
    (void)m;
    size_t limit = SIZE_MAX;
    if (arg != Py_None) {
        Py_ssize_t n = PyLong_AsSsize_t(arg);
        if (n == -1 && PyErr_Occurred()) return NULL;
        if (n < 0) {
            PyErr_SetString(PyExc_ValueError, "the pinned limit is None (none) or 0 or more bytes");
            return NULL;
        }
        limit = (size_t)n;
    }
    pinstage_set_pinned_limit(limit);
    Py_RETURN_NONE;
}

static PyObject *fn_pinned_usage(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    size_t held = 0, limit = 0;
    pinstage_get_pinned_usage(&held, &limit);
    if (limit == SIZE_MAX) return Py_BuildValue("(nO)", (Py_ssize_t)held, Py_None);
    return Py_BuildValue("(nn)", (Py_ssize_t)held, (Py_ssize_t)limit);
}

static PyObject *fn_pinned_retry_releases(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    pinstage_status s = pinstage_pinned_retry_releases();
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *fn_pool_set_threads(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned workers = PINSTAGE_POOL_AUTO;
    if (arg != Py_None) {
        long n = PyLong_AsLong(arg);
        if (n == -1 && PyErr_Occurred()) return NULL;
        if (n < 0) {
            PyErr_SetString(PyExc_ValueError, "workers is None (one per CPU) or 0 to 255");
            return NULL;
        }
        workers = (unsigned)n;
    }
    pinstage_status s;
    Py_BEGIN_ALLOW_THREADS s = pinstage_pool_set_threads(workers);
    Py_END_ALLOW_THREADS
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *fn_pool_set_spin_us(PyObject *m, PyObject *arg) {
    (void)m;
    long us = PyLong_AsLong(arg);
    if (us == -1 && PyErr_Occurred()) return NULL;
    if (us < 0) {
        PyErr_SetString(PyExc_ValueError, "spin_us must be 0 or more");
        return NULL;
    }
    pinstage_pool_set_spin_us((unsigned)us);
    Py_RETURN_NONE;
}

static PyObject *fn_pool_shutdown(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    Py_BEGIN_ALLOW_THREADS pinstage_pool_shutdown();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *fn_pool_info(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    pinstage_pool_info info;
    pinstage_pool_get_info(&info);
    return filled(PoolInfoType, "(IIIII)", info.workers, info.running, info.parked, info.spin_us, info.pools);
}

static PyObject *fn_set_adaptive(PyObject *m, PyObject *arg) {
    (void)m;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    pinstage_set_adaptive(on);
    Py_RETURN_NONE;
}

static PyObject *fn_route_info(PyObject *m, PyObject *args) {
    (void)m;
    int dir;
    Py_ssize_t bytes;
    if (!PyArg_ParseTuple(args, "in:route_info", &dir, &bytes)) return NULL;
    if (bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must be positive");
        return NULL;
    }
    pinstage_route_info info;
    pinstage_status s = pinstage_route_get_info((pinstage_direction)dir, (size_t)bytes, &info);
    if (s) return pspy_raise(s);
    return filled(RouteInfoType, "(OiddIIKKIK)", info.adaptive ? Py_True : Py_False, info.chosen, info.pageable_us,
                  info.staging_us, info.pageable_samples, info.staging_samples, (unsigned long long)info.switches,
                  (unsigned long long)info.probes, info.engine_threads, (unsigned long long)info.thread_changes);
}

static PyObject *fn_route_reset(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    pinstage_route_reset();
    Py_RETURN_NONE;
}

static PyObject *fn_set_default_profile(PyObject *m, PyObject *arg) {
    (void)m;
    if (arg != Py_None && !PyObject_TypeCheck(arg, &PsPy_ProfileType)) {
        PyErr_Format(PyExc_TypeError, "a pinstage.Profile or None; got %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    pinstage_status s = pinstage_profile_set_default(arg == Py_None ? NULL : ((PsPy_Profile *)arg)->profile);
    if (s) return pspy_raise(s);
    Py_RETURN_NONE;
}

static PyObject *fn_get_default_profile(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    pinstage_profile *p;
    pinstage_status s = pinstage_profile_get_default(&p);
    if (s) return pspy_raise(s);
    PsPy_Profile *self = PyObject_New(PsPy_Profile, &PsPy_ProfileType);
    if (!self) {
        pinstage_profile_free(p);
        return NULL;
    }
    self->profile = p;
    return (PyObject *)self;
}

static PyMethodDef functions[] = {
    {"driver_load", (PyCFunction)(void (*)(void))fn_driver_load, METH_VARARGS | METH_KEYWORDS,
     "driver_load(path=None)\n--\n\nLoads the CUDA driver library at `path` (None: $PINSTAGE_DRIVER, else "
     "libcuda.so.1). Optional: the first call that needs the driver loads it."},
    {"driver_info", fn_driver_info, METH_NOARGS, "driver_info() -> DriverInfo\n--\n\nThe driver loaded (loading it)."},
    {"device_count", fn_device_count, METH_NOARGS, "device_count() -> int\n--\n\nCUDA devices the driver sees."},
    {"device_info", fn_device_info, METH_VARARGS, "device_info(device=0) -> DeviceInfo\n--\n\nName, PCI bus id, "
                                                  "compute capability, multiprocessors, copy engines."},
    {"context_init", fn_context_init, METH_VARARGS,
     "context_init(device=0)\n--\n\nMakes the device's primary context current on this thread. Rarely needed: "
     "every call makes a context current itself when none is (the device of the memory it is given)."},
    {"status_name", fn_status_name, METH_O, "status_name(code) -> str\n--\n\ne.g. 'CUDA_ERROR_INVALID_VALUE' for 1."},
    {"set_pinned_limit", fn_set_pinned_limit, METH_O,
     "set_pinned_limit(nbytes)\n--\n\nCaps the pinned memory every buffer and ring holds together (None: no cap)."},
    {"pinned_usage", fn_pinned_usage, METH_NOARGS,
     "pinned_usage() -> (held, limit)\n--\n\nPinned bytes held now and the cap (None: none)."},
    {"pinned_retry_releases", fn_pinned_retry_releases, METH_NOARGS,
     "pinned_retry_releases()\n--\n\nReleases pinned blocks whose release the driver refused earlier."},
    {"pool_set_threads", fn_pool_set_threads, METH_O,
     "pool_set_threads(workers)\n--\n\nThe copy engine's worker threads (None: one per CPU the process may use, "
     "less the caller's and, from 8 CPUs, one more; 0: the calling thread only)."},
    {"pool_set_spin_us", fn_pool_set_spin_us, METH_O,
     "pool_set_spin_us(us)\n--\n\nHow long an idle worker spins before it parks."},
    {"pool_shutdown", fn_pool_shutdown, METH_NOARGS, "pool_shutdown()\n--\n\nStops and joins the workers."},
    {"pool_info", fn_pool_info, METH_NOARGS, "pool_info() -> PoolInfo\n--\n\nThe worker pool now."},
    {"set_adaptive", fn_set_adaptive, METH_O,
     "set_adaptive(on)\n--\n\nWhether upload / download follow what recent transfers achieved (default True, "
     "unless PINSTAGE_ADAPTIVE=0); off gives reproducible timing."},
    {"route_info", fn_route_info, METH_VARARGS,
     "route_info(direction, nbytes) -> RouteInfo\n--\n\nWhat adaptation knows of transfers of nbytes (H2D or D2H)."},
    {"route_reset", fn_route_reset, METH_NOARGS, "route_reset()\n--\n\nForgets what adaptation measured."},
    {"set_default_profile", fn_set_default_profile, METH_O,
     "set_default_profile(profile)\n--\n\nThe process default profile (None: the built-in one)."},
    {"get_default_profile", fn_get_default_profile, METH_NOARGS,
     "get_default_profile() -> Profile\n--\n\nA copy of the process default profile."},
    {NULL, NULL, 0, NULL},
};

/* ---- The module --------------------------------------------------------------------------- */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "pinstage",
    "Fast CUDA host<->device transfers for NumPy, PyTorch and CuPy users.\n\n"
    "Buffer moves host memory (anything with the buffer protocol) to and from device memory (a PyTorch "
    "or CuPy tensor, anything with __cuda_array_interface__ or __dlpack__, or a pinstage.DeviceArray) "
    "through one reused page-locked buffer, with the fastest route for the machine and the size; Ring "
    "does the same asynchronously. Streams are None (the legacy default stream), an int handle, or a "
    "stream object (cuda_stream, __cuda_stream__). Every transfer releases the GIL. Failures of the "
    "library or the driver raise pinstage.Error, which carries the status code, its name and the message.",
    -1,
    functions,
    NULL,
    NULL,
    NULL,
    NULL,
};

static int add_type(PyObject *m, PyTypeObject *type, const char *name) {
    if (PyType_Ready(type) < 0) return -1;
    return PyModule_AddObjectRef(m, name, (PyObject *)type);
}

PyMODINIT_FUNC PyInit_pinstage(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PsPy_Error = PyErr_NewExceptionWithDoc(
        "pinstage.Error",
        "A failed pinstage or CUDA driver call: .status is the CUresult code, .name its name "
        "(e.g. 'CUDA_ERROR_OUT_OF_MEMORY'), .message what exactly went wrong.",
        PyExc_RuntimeError, NULL);
    if (!PsPy_Error || PyModule_AddObjectRef(m, "Error", PsPy_Error) < 0 || pspy_stats_types_init() < 0 ||
        add_type(m, &PsPy_BufferType, "Buffer") < 0 || add_type(m, &PsPy_RingType, "Ring") < 0 ||
        add_type(m, &PsPy_TicketType, "Ticket") < 0 || add_type(m, &PsPy_DeviceArrayType, "DeviceArray") < 0 ||
        add_type(m, &PsPy_ProfileType, "Profile") < 0 || add_type(m, &PsPy_StreamType, "Stream") < 0 || PyType_Ready(&PsPy_PinnedType) < 0 ||
        PyModule_AddObjectRef(m, "Stats", (PyObject *)PsPy_StatsType) < 0 ||
        PyModule_AddObjectRef(m, "RingStats", (PyObject *)PsPy_RingStatsType) < 0 ||
        PyModule_AddObjectRef(m, "DriverInfo", (PyObject *)DriverInfoType) < 0 ||
        PyModule_AddObjectRef(m, "DeviceInfo", (PyObject *)DeviceInfoType) < 0 ||
        PyModule_AddObjectRef(m, "PoolInfo", (PyObject *)PoolInfoType) < 0 ||
        PyModule_AddObjectRef(m, "RouteInfo", (PyObject *)RouteInfoType) < 0 ||
        PyModule_AddObjectRef(m, "Placement", (PyObject *)PlacementType) < 0 ||
        PyModule_AddStringConstant(m, "__version__", pinstage_version_string()) < 0 ||
        PyModule_AddIntConstant(m, "H2D", PINSTAGE_H2D) < 0 || PyModule_AddIntConstant(m, "D2H", PINSTAGE_D2H) < 0 ||
        PyModule_AddIntConstant(m, "ROUTE_PAGEABLE", PINSTAGE_ROUTE_PAGEABLE) < 0 ||
        PyModule_AddIntConstant(m, "ROUTE_STAGED", PINSTAGE_ROUTE_STAGED) < 0 ||
        PyModule_AddIntConstant(m, "ROUTE_ENGINE", PINSTAGE_ROUTE_ENGINE) < 0 ||
        PyModule_AddIntConstant(m, "ADAPT_PROFILE", PINSTAGE_ADAPT_PROFILE) < 0 ||
        PyModule_AddIntConstant(m, "ADAPT_PAGEABLE", PINSTAGE_ADAPT_PAGEABLE) < 0 ||
        PyModule_AddIntConstant(m, "ADAPT_STAGING", PINSTAGE_ADAPT_STAGING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
