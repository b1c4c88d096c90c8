"""The programs of the CuPy benchmark, written as CuPy users write them: a pseudo-spectral flow solver
that regrids, k-means on a new data set each step, and batched dense linear algebra. Shapes come
from cupy_catalog.py; the data from CuPy's seeded generator, so every allocator runs the same program.

A program is built by build(program, shapes, seed) and runs one step per step(i); timed_step()
times one step to a device synchronize.
"""

import time

import cupy
import cupyx

F32, C64 = cupy.float32, cupy.complex64


class SpectralRegrid:
    """2-D incompressible flow in vorticity form on a periodic n x n grid, pseudo-spectral (cuFFT
    real transforms), 2/3-rule dealiasing, RK2 in time, for an ensemble of fields. When the step's
    shape changes the ensemble is regridded by spectral interpolation (modes kept, cut or padded
    with zeros) and members are dropped or added: the arrays of every size change at once, as in
    an adaptive solver, and cuFFT's plans for the new shape take their work areas from the
    allocator."""

    viscosity = 1e-3
    dt = 2e-4

    def __init__(self, shapes, params, seed):
        self.shapes = shapes
        self.substeps = params["substeps"]
        self.rng = cupy.random.RandomState(seed)
        self.shape = None
        self.w_hat = None
        self.energy = None

    def _operators(self, n):
        ky = (cupy.fft.fftfreq(n, 1.0 / n).astype(F32))[:, None]
        kx = (cupy.fft.rfftfreq(n, 1.0 / n).astype(F32))[None, :]
        k2 = kx * kx + ky * ky
        inv_k2 = cupy.where(k2 == 0, F32(0), 1 / cupy.maximum(k2, F32(1)))
        self.ikx, self.iky = (1j * kx).astype(C64), (1j * ky).astype(C64)
        self.k2, self.inv_k2 = k2, inv_k2
        self.dealias = ((cupy.abs(kx) < n / 3) & (cupy.abs(ky) < n / 3)).astype(F32)

    def _random_fields(self, members, n):
        """Smooth random vorticity: white noise with its modes above wavenumber 8 damped."""
        noise = cupy.fft.rfft2(self.rng.standard_normal((members, n, n), dtype=F32))
        return (noise * cupy.exp(-self.k2 / 64)).astype(C64)

    def _regrid(self, members, n):
        self._operators(n)
        if self.w_hat is None:
            self.w_hat = self._random_fields(members, n)
            return
        old = self.w_hat
        old_members, old_n = old.shape[0], old.shape[1]
        kept = min(members, old_members)
        half = min(n, old_n) // 2
        scale = F32((n / old_n) ** 2)  # rfft2 is unnormalised: the same field at n x n points
        new = cupy.zeros((members, n, n // 2 + 1), dtype=C64)
        new[:kept, :half, :half] = old[:kept, :half, :half] * scale
        new[:kept, n - half:, :half] = old[:kept, old_n - half:, :half] * scale
        if members > kept:
            new[kept:] = self._random_fields(members - kept, n)
        self.w_hat = new

    def _rhs(self, w_hat, n):
        psi = w_hat * self.inv_k2
        u = cupy.fft.irfft2(self.iky * psi, s=(n, n))
        v = -cupy.fft.irfft2(self.ikx * psi, s=(n, n))
        wx = cupy.fft.irfft2(self.ikx * w_hat, s=(n, n))
        wy = cupy.fft.irfft2(self.iky * w_hat, s=(n, n))
        advection = cupy.fft.rfft2(u * wx + v * wy) * self.dealias
        return -advection - self.viscosity * self.k2 * w_hat

    def step(self, i):
        members, n = self.shapes[i]
        if self.shape != (members, n):
            self._regrid(members, n)
            self.shape = (members, n)
        w = self.w_hat
        for _ in range(self.substeps):
            k1 = self._rhs(w, n)
            k2 = self._rhs(w + self.dt * k1, n)
            w = w + (0.5 * self.dt) * (k1 + k2)
        self.w_hat = w
        self.energy = (cupy.abs(w) ** 2).sum()

    def info(self):
        return {"energy": float(self.energy) if self.energy is not None else None}


class KMeans:
    """Lloyd's k-means on a new data set each step: squared distances by a matrix product (points x
    clusters, the largest array), nearest centroids by argmin, new centroids by scatter-add and a
    count per cluster."""

    def __init__(self, shapes, params, seed):
        self.shapes = shapes
        self.iterations = params["iterations"]
        self.rng = cupy.random.RandomState(seed)
        self.inertia = None

    def step(self, i):
        points, dims, clusters = self.shapes[i]
        x = self.rng.standard_normal((points, dims), dtype=F32)
        centroids = x[self.rng.randint(0, points, clusters)]
        x2 = (x * x).sum(axis=1, keepdims=True)
        for _ in range(self.iterations):
            distances = x2 - 2 * (x @ centroids.T) + (centroids * centroids).sum(axis=1)[None, :]
            labels = distances.argmin(axis=1)
            sums = cupy.zeros((clusters, dims), dtype=F32)
            cupyx.scatter_add(sums, labels, x)
            counts = cupy.bincount(labels, minlength=clusters).astype(F32)
            centroids = sums / cupy.maximum(counts, F32(1))[:, None]
        self.inertia = distances.min(axis=1).sum()

    def info(self):
        return {"inertia": float(self.inertia) if self.inertia is not None else None}


class LinalgBatch:
    """A batch of n x n systems solved by LU (batched getrf/getrs), the QR of their stacked rows (a
    tall matrix: geqrf/orgqr) and the eigenvalues of R^T R (syevd): cuBLAS's pointer arrays and
    cuSOLVER's workspaces all come from the allocator, sized by n."""

    def __init__(self, shapes, params, seed):
        self.shapes = shapes
        self.rng = cupy.random.RandomState(seed)
        self.result = None

    def step(self, i):
        batch, n = self.shapes[i]
        a = self.rng.standard_normal((batch, n, n), dtype=F32) + n * cupy.eye(n, dtype=F32)
        b = self.rng.standard_normal((batch, n, 1), dtype=F32)
        x = cupy.linalg.solve(a, b)
        residual = cupy.linalg.norm(a @ x - b)
        _, r = cupy.linalg.qr(a.reshape(batch * n, n))
        largest = cupy.linalg.eigvalsh(r.T @ r)[-1]
        self.result = residual + largest

    def info(self):
        return {"result": float(self.result) if self.result is not None else None}


def build(program, shapes, seed):
    """The program named by catalog entry `program`, with its per-step `shapes`."""
    kinds = {"spectral-regrid": SpectralRegrid, "kmeans-vary": KMeans, "linalg-batch": LinalgBatch}
    if program.name not in kinds:
        raise ValueError(f"no program {program.name!r}")
    return kinds[program.name](shapes, program.params, seed)


def timed_step(program, i, device):
    """Runs step `i`; returns its wall time in seconds, to a synchronize of `device`."""
    start = time.perf_counter()
    program.step(i)
    device.synchronize()
    return time.perf_counter() - start
