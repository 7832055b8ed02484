# SPDX-License-Identifier: MIT
"""The pinstage module on any driver, most of it on the emulated one (CI):
every call, every error, the lifetime of views of pinned memory, threads.
Needs only the standard library. Checks that need the emulator's instruments
(call counts, fault injection, several devices, slow copies) skip on a real
driver.

Run: PINSTAGE_DRIVER=/path/libpinstage_emu.so python3 -m unittest discover -s python/tests
"""
import array
import ctypes
import gc
import os
import random
import threading
import time
import unittest

import pinstage

KIB = 1024
MIB = 1024 * 1024


def pattern(n, seed):
    """n bytes that depend on the seed."""
    return bytearray(random.Random(seed).randbytes(n))


class Emulator:
    """The emulated driver's instruments, through ctypes; None on a real driver."""

    def __init__(self):
        info = pinstage.driver_info()
        self.on = info.emulated
        if not self.on:
            return
        lib = ctypes.CDLL(info.path)
        self.lib = lib
        lib.pinstage_emu_calls.restype = ctypes.c_ulong
        lib.pinstage_emu_calls.argtypes = [ctypes.c_char_p]
        lib.pinstage_emu_fail.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_int]
        lib.pinstage_emu_set_timing.argtypes = [ctypes.c_double, ctypes.c_double]

    def calls(self, entry=None):
        return self.lib.pinstage_emu_calls(entry.encode() if entry else None)

    def fail(self, entry, nth, result, every=0):
        self.lib.pinstage_emu_fail(entry.encode(), nth, result, every)

    def clear_faults(self):
        self.lib.pinstage_emu_clear_faults()

    def timing(self, latency_us, gbps):
        self.lib.pinstage_emu_set_timing(latency_us, gbps)


EMU = None


def setUpModule():
    global EMU
    EMU = Emulator()


def needs_emulator(test):
    def wrapper(self):
        if not EMU.on:
            self.skipTest("needs the emulated driver")
        return test(self)
    wrapper.__name__ = test.__name__
    wrapper.__doc__ = test.__doc__
    return wrapper


class ModuleTest(unittest.TestCase):
    def test_version_driver_device(self):
        self.assertRegex(pinstage.__version__, r"^\d+\.\d+\.\d+$")
        info = pinstage.driver_info()
        self.assertIsInstance(info.path, str)
        self.assertGreater(info.driver_version, 0)
        self.assertGreaterEqual(pinstage.device_count(), 1)
        dev = pinstage.device_info(0)
        self.assertEqual(len(dev.compute_capability), 2)
        self.assertGreater(dev.multiprocessors, 0)
        self.assertRegex(dev.pci_bus_id, r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9]$")
        self.assertIsInstance(dev.numa_node, int)
        self.assertGreaterEqual(dev.numa_node, -1)
        if info.emulated:
            self.assertEqual(dev.numa_node, -1)  # no PINSTAGE_EMU_NUMA: the attribute is unknown
        with self.assertRaises(pinstage.Error) as e:
            pinstage.device_info(10_000)
        self.assertEqual(e.exception.name, pinstage.status_name(e.exception.status))
        self.assertIn("CUDA_ERROR", str(e.exception))

    def test_status_names(self):
        self.assertEqual(pinstage.status_name(0), "CUDA_SUCCESS")
        self.assertEqual(pinstage.status_name(1), "CUDA_ERROR_INVALID_VALUE")
        self.assertEqual(pinstage.status_name(12345), "CUDA_ERROR_12345")
        self.assertTrue(issubclass(pinstage.Error, RuntimeError))

    def test_pool_pinned_adaptive(self):
        pinstage.pool_set_threads(2)
        self.assertEqual(pinstage.pool_info().workers, 2)
        self.assertEqual(pinstage.pool_info().pools, 0)  # no object placed on a node
        pinstage.pool_set_threads(None)
        pinstage.pool_set_spin_us(150)
        self.assertEqual(pinstage.pool_info().spin_us, 150)
        pinstage.pool_set_spin_us(200)
        with self.assertRaises(pinstage.Error) as e:
            pinstage.pool_set_threads(256)
        self.assertEqual(e.exception.status, 1)
        self.assertIn("at most 255", e.exception.message)
        with self.assertRaises(ValueError):
            pinstage.pool_set_threads(-1)
        pinstage.pool_shutdown()
        self.assertEqual(pinstage.pool_info().running, 0)
        held, limit = pinstage.pinned_usage()
        self.assertIsNone(limit)
        pinstage.set_pinned_limit(64 * MIB)
        self.assertEqual(pinstage.pinned_usage()[1], 64 * MIB)
        pinstage.set_pinned_limit(None)
        pinstage.pinned_retry_releases()
        info = pinstage.route_info(pinstage.H2D, 4 * MIB)
        self.assertIn(info.chosen, (pinstage.ADAPT_PROFILE, pinstage.ADAPT_PAGEABLE, pinstage.ADAPT_STAGING))
        pinstage.route_reset()
        info = pinstage.route_info(pinstage.H2D, 64 * MIB)
        self.assertEqual((info.engine_threads, info.thread_changes), (0, 0))  # nothing governed yet
        with self.assertRaises(ValueError):
            pinstage.route_info(pinstage.H2D, 0)
        with self.assertRaises(pinstage.Error):
            pinstage.route_info(7, 4096)
        pinstage.set_adaptive(False)
        self.assertFalse(pinstage.route_info(pinstage.D2H, 4096).adaptive)
        pinstage.set_adaptive(True)
        pinstage.route_reset()


class DeviceArrayTest(unittest.TestCase):
    def test_shapes_types_interface(self):
        with pinstage.DeviceArray((4, 5), "float32") as d:
            self.assertEqual(d.shape, (4, 5))
            self.assertEqual(d.dtype, "<f4")
            self.assertEqual(d.itemsize, 4)
            self.assertEqual(d.nbytes, 80)
            cai = d.__cuda_array_interface__
            self.assertEqual(cai["shape"], (4, 5))
            self.assertEqual(cai["typestr"], "<f4")
            self.assertEqual(cai["data"], (d.ptr, False))
            self.assertEqual(cai["version"], 3)
            self.assertIsNone(cai["strides"])
            self.assertIn("DeviceArray", repr(d))
        self.assertTrue(d.closed)
        self.assertEqual(pinstage.DeviceArray(3, "u8").dtype, "<u8")
        self.assertEqual(pinstage.DeviceArray(3, "<i2").dtype, "<i2")
        self.assertEqual(pinstage.DeviceArray(3).dtype, "|u1")

    def test_refusals(self):
        for bad in ("float128", "bfloat16", 3):
            with self.assertRaises(ValueError):
                pinstage.DeviceArray(4, bad)
        with self.assertRaises(ValueError):
            pinstage.DeviceArray(0)
        with self.assertRaises(ValueError):
            pinstage.DeviceArray((3, -1))
        d = pinstage.DeviceArray(8)
        d.close()
        d.close()  # twice is fine
        with self.assertRaises(ValueError):
            d.ptr
        with self.assertRaises(AttributeError):
            d.__cuda_array_interface__
        with self.assertRaises(ValueError):
            pinstage.Buffer().upload(d, bytearray(8))

    def test_baseline_copies(self):
        d = pinstage.DeviceArray(1000, "uint8")
        src = pattern(1000, 3)
        d.copy_from_host(src)
        out = bytearray(1000)
        d.copy_to_host(out)
        self.assertEqual(out, src)
        with self.assertRaises(ValueError):
            d.copy_to_host(bytearray(999))
        with self.assertRaises(TypeError):
            d.copy_to_host(bytes(1000))


class BufferTransferTest(unittest.TestCase):
    def round_trip(self, buf, nbytes, seed, stream=None):
        d = pinstage.DeviceArray(nbytes)
        src = pattern(nbytes, seed)
        buf.upload(d, src, stream)
        back = bytearray(nbytes)
        d.copy_to_host(back)
        self.assertEqual(back, src, f"upload of {nbytes} bytes")
        src2 = pattern(nbytes, seed + 1)
        d.copy_from_host(src2)
        out = bytearray(nbytes)
        buf.download(out, d, stream=stream)
        self.assertEqual(out, src2, f"download of {nbytes} bytes")

    def test_exact_bytes_at_every_size(self):
        with pinstage.Buffer() as buf:
            for i, n in enumerate((1, 4095, 4 * KIB, 150528, 196608, 1 * MIB + 7, 4915200, 9 * MIB)):
                self.round_trip(buf, n, 10 + i)
            st = buf.stats()
            self.assertEqual(st.bytes_uploaded, st.bytes_downloaded)
            self.assertEqual(st.staged_transfers + st.pageable_transfers + st.pinned_host_transfers, 16)
            self.assertGreaterEqual(st.pinned_allocations, 1)

    def test_typed_host_memory(self):
        d = pinstage.DeviceArray((2, 3), "float32")
        src = array.array("f", [1.5, 2.5, 3.5, 4.5, 5.5, 6.5])
        with pinstage.Buffer() as buf:
            buf.upload(d, src)
            out = array.array("f", [0.0] * 6)
            buf.download(out, d)
            self.assertEqual(out, src)
            buf.upload(d, memoryview(src))
            buf.upload(d, bytes(src.tobytes()))  # bytes: raw, read-only is fine for an upload
            buf.upload(dst=d, src=bytearray(src.tobytes()), stream=None)
            with self.assertRaises(TypeError):
                buf.upload(d, array.array("d", [0.0] * 3))  # 24 bytes of float64
            with self.assertRaises(TypeError):
                buf.upload(d, array.array("i", [0] * 6))  # int32 into float32
            with self.assertRaises(ValueError) as e:
                buf.upload(d, array.array("f", [0.0] * 5))
            self.assertIn("20 bytes", str(e.exception))
            self.assertIn("24 bytes", str(e.exception))

    def test_bad_arguments_change_nothing(self):
        d = pinstage.DeviceArray(64)
        with pinstage.Buffer() as buf:
            cases = [
                (TypeError, lambda: buf.upload(d, 12)),
                (TypeError, lambda: buf.upload(d, "text")),
                (TypeError, lambda: buf.upload(bytearray(64), bytearray(64))),  # dst not device memory
                (TypeError, lambda: buf.upload(object(), bytearray(64))),
                (ValueError, lambda: buf.upload(d, memoryview(bytearray(128))[::2])),  # not contiguous
                (ValueError, lambda: buf.upload(d, bytearray(0))),
                (TypeError, lambda: buf.download(bytes(64), d)),  # read-only destination
                (TypeError, lambda: buf.upload(d, bytearray(64), "stream")),
                (TypeError, lambda: buf.upload(d, bytearray(64), 1.5)),
                (ValueError, lambda: buf.upload(d, bytearray(64), -3)),
                (TypeError, lambda: buf.upload(d)),
                (TypeError, lambda: buf.upload(d, bytearray(64), None, 4)),
                (TypeError, lambda: buf.upload(d, bytearray(64), bogus=1)),
                (TypeError, lambda: buf.upload(d, bytearray(64), src=bytearray(64))),
                (TypeError, lambda: buf.upload_with(d, 17)),
                (TypeError, lambda: buf.download_into(bytearray(64))),
                (ValueError, lambda: buf.reserve(0)),
                (ValueError, lambda: setattr(buf, "threshold", -1)),
                (TypeError, lambda: setattr(buf, "profile", "fast")),
            ]
            for kind, call in cases:
                with self.assertRaises(kind):
                    call()
            self.assertEqual(buf.stats().bytes_uploaded, 0)
            self.assertEqual(buf.capacity, 0)

    @needs_emulator
    def test_bad_input_makes_no_copy(self):
        d = pinstage.DeviceArray(4096)
        buf = pinstage.Buffer()
        copies = EMU.calls("cuMemcpyHtoDAsync") + EMU.calls("cuMemAllocHost")
        for call in (lambda: buf.upload(d, bytearray(4095)), lambda: buf.upload(d, array.array("d", [0.0] * 512)),
                     lambda: buf.download(bytes(4096), d)):
            with self.assertRaises((ValueError, TypeError)):
                call()
        self.assertEqual(EMU.calls("cuMemcpyHtoDAsync") + EMU.calls("cuMemAllocHost"), copies)

    def test_settings(self):
        buf = pinstage.Buffer(capacity=100 * KIB, threshold=0, strict=True, adaptive=False)
        self.assertEqual(buf.capacity, 128 * KIB)
        self.assertEqual(buf.threshold, 0)
        self.assertTrue(buf.strict)
        self.assertFalse(buf.adaptive)
        d = pinstage.DeviceArray(8 * KIB)
        buf.upload(d, bytearray(8 * KIB))
        self.assertEqual(buf.stats().pageable_transfers, 1)  # threshold 0: the pageable path
        buf.threshold = None
        self.assertIsNone(buf.threshold)
        buf.threshold = 1 << 40
        buf.upload(d, bytearray(8 * KIB))
        self.assertEqual(buf.stats().staged_transfers, 1)
        buf.reserve(1 * MIB)
        self.assertEqual(buf.capacity, 1 * MIB)
        buf.shrink_to_fit()
        self.assertEqual(buf.capacity, 0)
        fixed = pinstage.Profile.fixed(pinstage.ROUTE_ENGINE, 4 * KIB, 2)
        buf.threshold = None
        buf.profile = fixed
        self.assertIs(buf.profile, fixed)
        buf.upload(d, bytearray(8 * KIB))
        self.assertEqual(buf.stats().engine_transfers, 1)
        buf.profile = None
        self.assertIsNone(buf.profile)
        buf.close()
        self.assertTrue(buf.closed)
        self.assertEqual(buf.capacity, 0)
        self.assertIn("closed", repr(buf))
        for call in (lambda: buf.upload(d, bytearray(8 * KIB)), lambda: buf.download_into(d), lambda: buf.reserve(8),
                     lambda: buf.shrink_to_fit()):
            with self.assertRaises(ValueError):
                call()
        buf.close()

    @needs_emulator
    def test_driver_failure_raises_and_leaves_the_buffer_usable(self):
        d = pinstage.DeviceArray(256 * KIB)
        buf = pinstage.Buffer()
        EMU.fail("cuMemAllocHost", 1, 2)
        with self.assertRaises(pinstage.Error) as e:
            buf.upload_with(d, lambda view: None)
        self.assertEqual(e.exception.status, 2)
        self.assertEqual(e.exception.name, "CUDA_ERROR_OUT_OF_MEMORY")
        self.assertIn("cuMemAllocHost", e.exception.message)
        EMU.fail("cuMemcpyDtoHAsync", 1, 700)
        with self.assertRaises(pinstage.Error) as e:
            buf.download_into(d)
        self.assertEqual(e.exception.status, 700)
        EMU.clear_faults()
        src = pattern(256 * KIB, 5)
        buf.upload(d, src)
        out = bytearray(256 * KIB)
        buf.download(out, d)
        self.assertEqual(out, src)

    def test_pinned_limit_falls_back_or_fails(self):
        d = pinstage.DeviceArray(2 * MIB)
        pinstage.set_pinned_limit(pinstage.pinned_usage()[0])
        try:
            with pinstage.Buffer() as buf:
                buf.upload(d, bytearray(2 * MIB))
                self.assertEqual(buf.stats().pinned_fallbacks, 1)
                buf.strict = True
                with self.assertRaises(pinstage.Error) as e:
                    buf.upload(d, bytearray(2 * MIB))
                self.assertEqual(e.exception.status, 2)
        finally:
            pinstage.set_pinned_limit(None)


class ViewTest(unittest.TestCase):
    def test_download_into_view_ends_at_the_next_call(self):
        d = pinstage.DeviceArray((3, 4), "int32")
        values = array.array("i", range(12))
        d.copy_from_host(values)
        buf = pinstage.Buffer()
        view = buf.download_into(d)
        self.assertTrue(view.readonly)
        self.assertEqual(view.shape, (3, 4))
        self.assertEqual(view.format, "i")
        self.assertEqual(view.tolist(), [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
        with self.assertRaises(TypeError):
            view[0, 0] = 5
        buf.upload(d, array.array("i", [7] * 12))  # reuses the pinned memory: the view ends
        with self.assertRaises(ValueError):
            view.tolist()
        with buf.download_into(d) as v2:
            self.assertEqual(v2[2, 3], 7)

    def test_a_view_still_exported_blocks_reuse(self):
        d = pinstage.DeviceArray(64)
        buf = pinstage.Buffer()
        view = buf.download_into(d)
        first = view.tobytes()
        held = memoryview(view)  # something else holds the memory (as numpy.frombuffer would)
        for call in (lambda: buf.upload(d, bytearray(64)), lambda: buf.shrink_to_fit(), lambda: buf.close(),
                     lambda: buf.download_into(d)):
            with self.assertRaises(BufferError):
                call()
        self.assertFalse(buf.closed)
        self.assertEqual(held.tobytes(), first)  # still valid: nothing was reused
        held.release()
        buf.upload(d, bytearray(64))
        buf.close()

    def test_views_keep_their_buffer_alive(self):
        d = pinstage.DeviceArray(4096)
        d.copy_from_host(pattern(4096, 9))
        view = pinstage.Buffer().download_into(d)  # the buffer has no other reference
        gc.collect()
        self.assertEqual(view.tobytes(), bytes(pattern(4096, 9)))
        del view
        gc.collect()

    def test_upload_with_fill(self):
        d = pinstage.DeviceArray((2, 8), "float32")
        kept = []

        def fill(view):
            self.assertFalse(view.readonly)
            self.assertEqual(view.shape, (2, 8))
            self.assertEqual(view.format, "f")
            view.cast("B")[:] = array.array("f", [float(i) for i in range(16)]).tobytes()
            kept.append(view)

        with pinstage.Buffer() as buf:
            buf.upload_with(d, fill)
            out = array.array("f", [0.0] * 16)
            d.copy_to_host(out)
            self.assertEqual(list(out), [float(i) for i in range(16)])
            with self.assertRaises(ValueError):  # ended when fill returned
                kept[0].tolist()

            def failing(view):
                raise KeyError("no frame")
            with self.assertRaises(KeyError):
                buf.upload_with(d, failing)

            def reentering(view):
                buf.upload(d, bytearray(64))
            with self.assertRaises(RuntimeError):
                buf.upload_with(d, reentering)
            buf.upload(d, bytearray(64))  # usable after all of that


class StreamTest(unittest.TestCase):
    def test_stream_kinds(self):
        d = pinstage.DeviceArray(100 * KIB)
        src = pattern(100 * KIB, 21)
        with pinstage.Stream() as s, pinstage.Buffer() as buf:
            self.assertEqual(s.cuda_stream, s.handle)
            self.assertEqual(s.__cuda_stream__(), (0, s.handle))

            class TorchLike:
                cuda_stream = s.handle

            class ProtocolLike:
                def __cuda_stream__(self):
                    return (0, s.handle)

            class Broken:
                def __cuda_stream__(self):
                    return "no"

            for stream in (None, 0, 1, 2, s.handle, s, TorchLike(), ProtocolLike()):
                buf.upload(d, src, stream=stream)
                out = bytearray(100 * KIB)
                buf.download(out, d, stream)
                self.assertEqual(out, src)
            with self.assertRaises(TypeError):
                buf.upload(d, src, Broken())
            s.synchronize()

    @needs_emulator
    def test_producer_stream_of_the_interface_is_waited_for(self):
        d = pinstage.DeviceArray(4096)
        with pinstage.Stream() as producer, pinstage.Stream() as ours, pinstage.Buffer() as buf:
            class Tensor:  # a framework tensor whose work runs on `producer`
                __cuda_array_interface__ = dict(d.__cuda_array_interface__, stream=producer.handle)
            waits = EMU.calls("cuStreamWaitEvent")
            buf.upload(Tensor(), bytearray(4096), stream=ours)
            self.assertEqual(EMU.calls("cuStreamWaitEvent"), waits + 1)
            buf.upload(Tensor(), bytearray(4096), stream=producer)  # the same stream: nothing to wait for
            self.assertEqual(EMU.calls("cuStreamWaitEvent"), waits + 1)


class InterfaceTest(unittest.TestCase):
    def test_cuda_array_interface_objects(self):
        d = pinstage.DeviceArray((16, 16), "uint16")
        base = d.__cuda_array_interface__

        class Cai:
            def __init__(self, **changes):
                self.__cuda_array_interface__ = dict(base, **changes)

        with pinstage.Buffer() as buf:
            src = array.array("H", range(256))
            buf.upload(Cai(), src)
            out = array.array("H", [0] * 256)
            buf.download(out, Cai(version=2))
            self.assertEqual(out, src)
            buf.upload(Cai(strides=(32, 2)), src)  # C-contiguous strides are fine
            for bad, kind in ((Cai(strides=(2, 32)), ValueError), (Cai(typestr=">u2"), ValueError),
                              (Cai(data=(base["data"][0], True)), ValueError), (Cai(mask=object()), ValueError),
                              (Cai(data=(12345, False)), ValueError), (Cai(shape=(0, 16)), ValueError)):
                with self.assertRaises(kind):
                    buf.upload(bad, src)
            # A read-only device array can be downloaded from.
            buf.download(out, Cai(data=(base["data"][0], True)))

    def test_dlpack_objects(self):
        d = pinstage.DeviceArray(64, "float32")
        deleted = []

        class DLDevice(ctypes.Structure):
            _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

        class DLDataType(ctypes.Structure):
            _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

        class DLTensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                        ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

        class DLManaged(ctypes.Structure):
            pass
        Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManaged))
        DLManaged._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter)]
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        keep = []

        class Producer:
            def __init__(self, device_type=2, code=2, bits=32, strides=None):
                self.device_type, self.code, self.bits, self.strides = device_type, code, bits, strides
                self.streams = []

            def __dlpack_device__(self):
                return (self.device_type, 0)

            def __dlpack__(self, stream=None):
                self.streams.append(stream)
                shape = (ctypes.c_int64 * 1)(64)
                strides = (ctypes.c_int64 * 1)(self.strides) if self.strides else None
                managed = DLManaged()
                managed.dl_tensor = DLTensor(d.ptr, DLDevice(self.device_type, 0), 1,
                                             DLDataType(self.code, self.bits, 1), shape, strides, 0)
                managed.deleter = Deleter(lambda m: deleted.append(True))
                keep.extend([shape, strides, managed])
                return capsule_new(ctypes.addressof(managed), b"dltensor", None)

            @property
            def __cuda_array_interface__(self):
                raise AttributeError("no interface: DLPack only")

        src = array.array("f", [0.25 * i for i in range(64)])
        with pinstage.Buffer() as buf, pinstage.Stream() as s:
            p = Producer()
            buf.upload(p, src, stream=s)
            self.assertEqual(p.streams, [s.handle])  # the producer is told our stream
            out = array.array("f", [0.0] * 64)
            buf.download(out, Producer())  # the legacy stream is 1 to DLPack
            self.assertEqual(out, src)
            self.assertEqual(len(deleted), 2)  # each consumed tensor given back once
            buf.upload(Producer(strides=1), src)
            with self.assertRaises(ValueError):
                buf.upload(Producer(strides=2), array.array("f", [0.0] * 64))  # not contiguous
            with self.assertRaises(TypeError):
                buf.upload(Producer(device_type=1), src)  # a CPU tensor
            with self.assertRaises(TypeError):
                buf.upload(Producer(code=0), src)  # int32 device memory, float32 host memory
            self.assertEqual(len(deleted), 5)  # the refused ones were given back too (the CPU one never taken)
            # bfloat16 has no host format: bytes of the right size are taken.
            buf.upload(Producer(code=4, bits=16), bytearray(128))

    def test_torch_tensors_read_without_their_interface(self):
        """A plain torch.Tensor is read through its C getters, not its __cuda_array_interface__
        property; whatever that property treats specially takes the general path. A stand-in
        torch module in a child process, so a real torch in this one stays as it is."""
        script = r"""
import array, sys, types
import pinstage

torch = types.ModuleType("torch")
class dtype:
    def __init__(self, name):
        self.name = name
for name in ("float32", "float16", "int16", "uint8", "complex64"):
    setattr(torch, name, dtype(name))
torch.strided, torch.sparse_coo = object(), object()
class Size(tuple):
    pass
reads = []
class Tensor:
    # What pinstage reads of a tensor, over a DeviceArray's memory, and no interface at all:
    # the general path would refuse it with "must be device memory".
    def __init__(self, mem, shape, dt, **changes):
        self.mem, self.shape, self.dtype = mem, Size(shape), dt
        self.is_cuda, self.requires_grad, self.layout, self.contiguous = True, False, torch.strided, True
        self.device = 0
        self.__dict__.update(changes)
    def is_contiguous(self):
        return self.contiguous
    def data_ptr(self):
        reads.append(1)
        return self.mem.ptr
    def get_device(self):
        if isinstance(self.device, Exception):
            raise self.device
        return self.device
Tensor.__module__ = "torch"
torch.Tensor, torch.Size = Tensor, Size
sys.modules["torch"] = torch

def refused(call, pattern, exc=TypeError):
    try:
        call()
    except exc as e:
        assert pattern in str(e), (pattern, str(e))
    else:
        raise AssertionError("no " + exc.__name__ + " for " + pattern)

mem = pinstage.DeviceArray((8, 8), "float32")
src = array.array("f", [0.5 * i for i in range(64)])
with pinstage.Buffer() as buf:
    t = Tensor(mem, (8, 8), torch.float32)
    before = sys.getrefcount(t)
    for _ in range(100):
        buf.upload(t, src)
    assert sys.getrefcount(t) == before, "a reference to the tensor leaked"
    out = array.array("f", bytes(256))
    buf.download(out, mem)
    assert out == src, "the upload did not land where data_ptr() points"
    out = array.array("f", bytes(256))
    buf.download(out, t)
    assert out == src, "the download did not come from where data_ptr() points"
    assert len(reads) == 101, len(reads)
    buf.upload(Tensor(mem, (128,), torch.int16), array.array("h", range(128)))
    buf.upload(Tensor(mem, (256,), torch.uint8), bytes(range(256)))

    # The general path: no interface here, so it refuses; data_ptr() not read.
    del reads[:]
    for changes in ({"requires_grad": True}, {"layout": torch.sparse_coo}, {"is_cuda": False},
                    {"contiguous": False}, {"dtype": torch.complex64}):
        refused(lambda: buf.upload(Tensor(mem, (8, 8), torch.float32, **changes), src), "must be device memory")
    class Derived(Tensor):
        pass
    refused(lambda: buf.upload(Derived(mem, (8, 8), torch.float32), src), "must be device memory")
    assert reads == [], "a tensor the general path decides on was read"

    # Errors of the fast path itself, each naming the mistake.
    refused(lambda: buf.upload(Tensor(mem, (8, 8), torch.float16), src), "float16")
    refused(lambda: buf.upload(Tensor(mem, (4, 8), torch.float32), src), "bytes", ValueError)
    refused(lambda: buf.upload(Tensor(mem, (0, 8), torch.float32), src), "is empty", ValueError)
    refused(lambda: buf.upload(Tensor(mem, (8, 8), torch.float32, device=RuntimeError("gone")), src), "gone",
            RuntimeError)
    refused(lambda: buf.upload(Tensor(mem, (8, 8), torch.float32, device=5), src), "device 5", ValueError)
    assert sys.getrefcount(t) == before
print("ok")
"""
        import subprocess
        import sys
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(pinstage.__file__))] +
                                            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), "ok")


class ThreadTest(unittest.TestCase):
    def test_own_buffers_on_threads(self):
        errors = []

        def worker(seed):
            try:
                d = pinstage.DeviceArray(300 * KIB)
                with pinstage.Buffer() as buf:
                    for r in range(20):
                        src = pattern(300 * KIB, seed * 100 + r)
                        buf.upload(d, src)
                        out = bytearray(300 * KIB)
                        buf.download(out, d)
                        if out != src:
                            errors.append((seed, r))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_one_buffer_shared_by_threads(self):
        buf = pinstage.Buffer()
        errors = []

        def worker(seed):
            d = pinstage.DeviceArray(64 * KIB)
            for r in range(25):
                src = pattern(64 * KIB, seed * 1000 + r)
                try:
                    buf.upload(d, src)
                    out = bytearray(64 * KIB)
                    buf.download(out, d)
                    if out != src:
                        errors.append((seed, r))
                except BufferError:
                    pass  # another thread's view: allowed to refuse, never to mix bytes
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        buf.close()

    @needs_emulator
    def test_the_gil_is_released_during_transfers(self):
        EMU.timing(20, 0.05)  # 1 MiB takes about 20 ms
        try:
            d = pinstage.DeviceArray(1 * MIB)
            ticks = [0]
            stop = threading.Event()

            def counter():
                while not stop.is_set():
                    ticks[0] += 1
                    time.sleep(0)

            t = threading.Thread(target=counter)
            t.start()
            with pinstage.Buffer(adaptive=False, threshold=1 << 40) as buf:
                start = ticks[0]
                buf.upload(d, bytearray(1 * MIB))
                buf.download(bytearray(1 * MIB), d)
                ran = ticks[0] - start
            stop.set()
            t.join()
            self.assertGreater(ran, 10)  # the other thread ran while we waited
        finally:
            EMU.timing(20, 4)


class RingTest(unittest.TestCase):
    def test_async_round_trips(self):
        n = 200 * KIB
        devs = [pinstage.DeviceArray(n) for _ in range(6)]
        with pinstage.Ring(3) as ring:
            srcs = [pattern(n, 40 + i) for i in range(6)]
            for d, s in zip(devs, srcs):
                ring.upload_async(d, s)
            ring.synchronize()
            for d, s in zip(devs, srcs):
                back = bytearray(n)
                d.copy_to_host(back)
                self.assertEqual(back, s)
            tickets = [ring.download_async(d) for d in devs[:3]]
            self.assertTrue(all(t.id for t in tickets))
            for t, s in zip(tickets, srcs):
                view = t.wait()
                self.assertEqual(view.tobytes(), bytes(s))
                self.assertEqual(t.wait().tobytes(), bytes(s))  # collecting again gives the same bytes
                t.release()
            st = ring.stats()
            self.assertEqual(st.uploads, 6)
            self.assertEqual(st.downloads, 3)
            self.assertEqual(st.bytes_uploaded, 6 * n)

    def test_views_end_at_the_next_enqueue(self):
        d = pinstage.DeviceArray(4096)
        d.copy_from_host(pattern(4096, 77))
        with pinstage.Ring(2) as ring:
            t = ring.download_async(d)
            view = t.wait()
            self.assertEqual(view.tobytes(), bytes(pattern(4096, 77)))
            ring.upload_async(d, bytearray(4096))
            with self.assertRaises(ValueError):
                view.tobytes()
            t2 = ring.download_async(d)
            held = memoryview(t2.wait())
            with self.assertRaises(BufferError):
                ring.upload_async(d, bytearray(4096))
            t2.release()  # the slot may go to the next enqueue, which still refuses while held
            with self.assertRaises(BufferError):
                ring.download_async(d)
            held.release()
            with self.assertRaises(ValueError):
                t2.wait()
            ring.upload_async(d, bytearray(4096))

    def test_fill_poll_nonblocking_and_errors(self):
        d = pinstage.DeviceArray((4, 4), "float64")
        with pinstage.Ring(2, nonblocking=True) as ring:
            ring.upload_with_async(d, lambda v: v.cast("B").__setitem__(slice(None), bytes(range(128))))
            t = ring.download_async(d)
            view = None
            deadline = time.time() + 10
            while view is None and time.time() < deadline:
                view = t.poll()
            self.assertEqual(view.cast("B").tobytes(), bytes(range(128)))
            self.assertEqual(view.shape, (4, 4))
            with self.assertRaises(TypeError):
                ring.upload_async(d, 5)
            with self.assertRaises(ValueError):
                ring.upload_async(d, bytearray(127))
            with self.assertRaises(TypeError):
                ring.upload_with_async(d, None)
            with self.assertRaises(pinstage.Error) as e:
                pinstage.Ring(65)
            self.assertEqual(e.exception.status, 1)
        with self.assertRaises(ValueError):
            ring.upload_async(d, bytearray(128))
        with self.assertRaises(ValueError):
            t.wait()

    def test_uncollected_tickets_are_released_when_dropped(self):
        d = pinstage.DeviceArray(4096)
        with pinstage.Ring(2) as ring:
            for _ in range(10):  # without the release on drop, the third would find no slot
                ring.download_async(d)
            ring.synchronize()


class ProfileTest(unittest.TestCase):
    def test_profiles(self):
        builtin = pinstage.Profile.builtin()
        self.assertIn("pinstage-profile 1", str(builtin))
        route, chunk, threads = builtin.plan(pinstage.H2D, 4 * MIB)
        self.assertIn(route, (pinstage.ROUTE_PAGEABLE, pinstage.ROUTE_STAGED, pinstage.ROUTE_ENGINE))
        fixed = pinstage.Profile.fixed(pinstage.ROUTE_STAGED)
        self.assertEqual(fixed.plan(pinstage.D2H, 12345)[0], pinstage.ROUTE_STAGED)
        with self.assertRaises(pinstage.Error):
            pinstage.Profile.fixed(9)
        with self.assertRaises(ValueError):
            builtin.plan(pinstage.H2D, 0)
        pinstage.set_default_profile(fixed)
        self.assertEqual(pinstage.get_default_profile().plan(pinstage.H2D, 4096)[0], pinstage.ROUTE_STAGED)
        pinstage.set_default_profile(None)
        with self.assertRaises(TypeError):
            pinstage.set_default_profile("x")

    @needs_emulator
    def test_calibrate_save_load(self):
        import tempfile
        measured = pinstage.Profile.calibrate()
        self.assertIn("origin measured", str(measured))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "profile.txt")
            measured.save(path)
            loaded = pinstage.Profile.load(path)
            self.assertEqual(str(loaded), str(measured))
            with open(path, "a") as f:
                f.write("trailing\n")
            with self.assertRaises(pinstage.Error) as e:
                pinstage.Profile.load(path)
            self.assertIn("text after 'end'", e.exception.message)
        with self.assertRaises(pinstage.Error):
            pinstage.Profile.load("/nonexistent/profile.txt")


class BindingTest(unittest.TestCase):
    """Buffers and Rings bound to a GPU (device=): calls in its context from any thread, placement."""

    def test_bound_to_device_0_with_memory_placed(self):
        with pinstage.Buffer(device=0, numa_node=0) as buf, pinstage.Ring(2, device=0) as ring, \
                pinstage.DeviceArray(300 * KIB) as d:
            src, back = pattern(300 * KIB, 5), bytearray(300 * KIB)
            buf.upload(d, src)
            buf.download(back, d)
            self.assertEqual(back, src)
            where = buf.placement()
            self.assertEqual((where.device, where.memory_node), (0, 0))
            self.assertGreater(where.pinned_bytes, 0)
            self.assertIn(where.memory_found, (0, -1))  # the kernel's answer: this host's node, or not said
            ring.upload_async(d, pattern(300 * KIB, 6))
            self.assertEqual(ring.download_async(d).wait().tobytes(), bytes(pattern(300 * KIB, 6)))
            self.assertEqual(ring.placement().device, 0)
            self.assertEqual(ring.placement().memory_node, -1)  # one node here or not: only placed on several
        self.assertEqual(pinstage.Buffer().placement().device, -1)

    def test_bad_bindings(self):
        with self.assertRaises(ValueError):
            pinstage.Buffer(numa_node=0)  # no device to bind to
        with self.assertRaises(ValueError):
            pinstage.Ring(device=0, numa_node=-5)
        with self.assertRaises(pinstage.Error) as e:
            pinstage.Buffer(device=10_000)
        self.assertEqual(e.exception.status, 101)

    def test_another_devices_memory_from_this_threads_context(self):
        if not pinstage.driver_info().emulated:
            self.skipTest("two devices: the emulated driver's")
        script = r"""
import threading, pinstage
made = []
t = threading.Thread(target=lambda: made.append(pinstage.DeviceArray(4096, device=1)))
t.start(); t.join()
d1 = made[0]
assert d1.device == 1
pinstage.context_init(0)
try:
    pinstage.Buffer().upload(d1, bytearray(4096))
    raise SystemExit("an unbound buffer took device 1's memory in device 0's context")
except ValueError as e:
    assert "device 1" in str(e), e
src = bytes(range(256)) * 16
with pinstage.Buffer(device=1) as buf, pinstage.Ring(device=1) as ring:
    buf.upload(d1, src)
    back = bytearray(4096)
    buf.download(back, d1)
    assert back == src
    ring.upload_async(d1, src[::-1])
    assert ring.download_async(d1).wait().tobytes() == src[::-1]
    where = buf.placement()
    assert (where.device, where.device_node) == (1, 1), where
    assert pinstage.DeviceArray(16).device == 0  # this thread's context is device 0's again
print("ok")
"""
        import subprocess
        import sys
        env = dict(os.environ, PINSTAGE_EMU_DEVICES="2", PINSTAGE_EMU_NUMA="0,1")
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(pinstage.__file__))] +
                                            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), "ok")


if __name__ == "__main__":
    unittest.main()
