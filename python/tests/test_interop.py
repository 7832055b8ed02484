# SPDX-License-Identifier: MIT
"""pinstage with PyTorch and CuPy on a real GPU (skipped without them or
without a GPU; scripts/gpu-check runs it on the H200): NumPy arrays in and
out of framework tensors, exact bytes; transfers ordered on the framework's
own stream with no framework synchronize before them; the producer stream
of __cuda_array_interface__ honoured; bfloat16 through DLPack; refusals of
CPU tensors and non-contiguous views."""
import unittest

import pinstage

try:
    import numpy
except ImportError:  # pragma: no cover - only where NumPy is missing
    numpy = None
try:
    import torch
    HAVE_TORCH = torch.cuda.is_available()
except Exception:  # noqa: BLE001 - any import failure means no PyTorch here
    torch, HAVE_TORCH = None, False
try:
    import cupy
    HAVE_CUPY = cupy.cuda.runtime.getDeviceCount() > 0
except Exception:  # noqa: BLE001
    cupy, HAVE_CUPY = None, False

MIB = 1024 * 1024

# The frameworks' memory is the real driver's: under the emulated driver
# (PINSTAGE_DRIVER, as the C build's test of the module runs) it is not
# device memory pinstage's driver knows.
try:
    ON_REAL_DRIVER = not pinstage.driver_info().emulated
except pinstage.Error:
    ON_REAL_DRIVER = False
HAVE_TORCH = HAVE_TORCH and ON_REAL_DRIVER
HAVE_CUPY = HAVE_CUPY and ON_REAL_DRIVER


def busy(stream_ctx, ms):
    """Keeps the current stream busy for about `ms` milliseconds."""
    torch.cuda._sleep(int(ms * 2_000_000))  # cycles at about 2 GHz


@unittest.skipUnless(HAVE_TORCH and numpy is not None, "needs PyTorch with a GPU, NumPy and the real driver")
class TorchTest(unittest.TestCase):
    def setUp(self):
        torch.cuda.init()
        self.dev = torch.device("cuda", 0)
        torch.cuda.set_device(self.dev)

    def test_numpy_in_and_out_of_tensors(self):
        rng = numpy.random.default_rng(1)
        with pinstage.Buffer() as buf:
            for shape, dtype, tdtype in (((640, 640, 3), numpy.float32, torch.float32),
                                         ((4096,), numpy.uint8, torch.uint8), ((33, 1025), numpy.float16, torch.float16),
                                         ((8, 8), numpy.int64, torch.int64), ((7 * MIB // 4,), numpy.float32,
                                                                              torch.float32)):
                a = rng.standard_normal(shape).astype(dtype) if dtype != numpy.uint8 else \
                    rng.integers(0, 256, shape, dtype=numpy.uint8)
                t = torch.empty(shape, dtype=tdtype, device=self.dev)
                buf.upload(t, a)
                self.assertTrue(numpy.array_equal(t.cpu().numpy(), a))
                t.mul_(2)
                out = numpy.empty_like(a)
                buf.download(out, t)
                self.assertTrue(numpy.array_equal(out, a * 2))
                with buf.download_into(t) as view:
                    self.assertTrue(numpy.array_equal(numpy.asarray(view), a * 2))
                buf.upload_with(t, lambda v: numpy.copyto(numpy.asarray(v), a))
                self.assertTrue(numpy.array_equal(t.cpu().numpy(), a))
            with self.assertRaises(TypeError):
                buf.upload(torch.empty(4, device=self.dev), numpy.zeros(4, numpy.float64))

    def test_bound_buffer_and_ring_on_the_frameworks_stream(self):
        """A Buffer and a Ring bound to the tensor's GPU, called from a thread with no context of
        its own and on PyTorch's stream: exact bytes, ordered after the stream's work."""
        a = numpy.arange(640 * 640 * 3, dtype=numpy.float32).reshape(640, 640, 3)
        t = torch.empty(a.shape, device=self.dev)
        s = torch.cuda.Stream()
        results = []

        def other_thread():
            with pinstage.Buffer(device=0) as buf, pinstage.Ring(device=0) as ring:
                buf.upload(t, a, stream=s)
                with torch.cuda.stream(s):
                    t.mul_(3)
                out = numpy.empty_like(a)
                buf.download(out, t, stream=s)
                results.append(numpy.array_equal(out, a * 3))
                ring.upload_async(t, a, stream=s)
                results.append(numpy.array_equal(numpy.asarray(ring.download_async(t, stream=s).wait())
                                                 .view(numpy.float32).reshape(a.shape), a))
                results.append(buf.placement().device == 0)

        import threading
        th = threading.Thread(target=other_thread)
        th.start()
        th.join()
        self.assertEqual(results, [True, True, True])

    def test_ordered_on_the_frameworks_stream_without_synchronize(self):
        n = 16 * MIB
        s = torch.cuda.Stream()
        host = numpy.empty(n, numpy.uint8)
        with pinstage.Buffer() as buf:
            for round_ in range(3):
                t = torch.zeros(n, dtype=torch.uint8, device=self.dev)
                torch.cuda.synchronize()
                with torch.cuda.stream(s):
                    busy(s, 20)
                    t.fill_(7 + round_)
                # Download on the same stream, no synchronize: it sees the fill.
                buf.download(host, t, stream=s)
                self.assertTrue((host == 7 + round_).all())
                # Upload on the stream, then framework work on it reads the data.
                src = numpy.full(n, 3 + round_, numpy.uint8)
                with torch.cuda.stream(s):
                    busy(s, 10)
                buf.upload(t, src, stream=s)
                with torch.cuda.stream(s):
                    r = t.to(torch.int32).sum()
                s.synchronize()
                self.assertEqual(int(r), n * (3 + round_))

    def test_pinned_tensor_is_one_dma(self):
        p = torch.empty(4 * MIB, dtype=torch.uint8, pin_memory=True)
        p.fill_(5)
        t = torch.empty(4 * MIB, dtype=torch.uint8, device=self.dev)
        with pinstage.Buffer() as buf:
            buf.upload(t, p.numpy())
            self.assertEqual(buf.stats().pinned_host_transfers, 1)
            self.assertEqual(buf.capacity, 0)
        self.assertTrue(bool((t == 5).all()))

    def test_bfloat16_by_dlpack_and_refusals(self):
        t = torch.arange(1024, dtype=torch.bfloat16, device=self.dev)
        raw = numpy.empty(2048, numpy.uint8)
        with pinstage.Buffer() as buf:
            buf.download(raw, t)
            self.assertEqual(raw.tobytes(), t.cpu().view(torch.uint8).numpy().tobytes())
            with self.assertRaises(TypeError):
                buf.upload(torch.zeros(16), numpy.zeros(16, numpy.float32))  # a CPU tensor
            with self.assertRaises(ValueError):
                buf.upload(torch.zeros((8, 8), device=self.dev).t(), numpy.zeros((8, 8), numpy.float32))
            with self.assertRaises(ValueError):
                buf.upload(torch.zeros(8, device=self.dev), numpy.zeros(16, numpy.float32)[::2])

    def test_ring_frame_loop(self):
        frames = [numpy.full((640, 640, 3), i, numpy.float32) for i in range(6)]
        t_in = torch.empty((640, 640, 3), device=self.dev)
        t_out = torch.empty_like(t_in)
        s = torch.cuda.Stream()
        got = []
        with pinstage.Ring(3) as ring:
            pending = None
            for i, f in enumerate(frames):
                ring.upload_async(t_in, f, stream=s)
                with torch.cuda.stream(s):
                    t_out.copy_(t_in * 2)
                ticket = ring.download_async(t_out, stream=s)
                if pending is not None:
                    got.append(float(numpy.asarray(pending.wait())[0, 0, 0]))
                    pending.release()
                pending = ticket
            got.append(float(numpy.asarray(pending.wait())[0, 0, 0]))
        self.assertEqual(got, [2.0 * i for i in range(6)])


@unittest.skipUnless(HAVE_CUPY and numpy is not None, "needs CuPy with a GPU, NumPy and the real driver")
class CupyTest(unittest.TestCase):
    def test_cupy_arrays_and_streams(self):
        n = 8 * MIB
        host = numpy.empty(n, numpy.uint8)
        with pinstage.Buffer() as buf, cupy.cuda.Stream(non_blocking=True) as s:
            x = cupy.zeros(n, dtype=cupy.uint8)
            x.fill(9)
            buf.download(host, x, stream=s)
            self.assertTrue((host == 9).all())
            src = numpy.arange(n, dtype=numpy.uint32).view(numpy.uint8)[:n]
            buf.upload(x, src, stream=s)
            y = x.astype(cupy.int64).sum()
            s.synchronize()
            self.assertEqual(int(y), int(src.astype(numpy.int64).sum()))
            with self.assertRaises(TypeError):
                buf.upload(cupy.zeros(4, cupy.float64), numpy.zeros(4, numpy.float32))


if __name__ == "__main__":
    unittest.main()
