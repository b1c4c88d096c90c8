"""What the CuPy program benchmark runs, without CuPy: the programs (their seeded per-step shapes)
and the allocators, importable by the launcher and by the tests (python/tests/test_cupy_bench.py).
Named apart from bench/gpu/train/catalog.py, whose parse_names and shapes_digest the launcher uses too.

Shapes come from Python's own seeded RNG, so every allocator sees the same program.
"""

import dataclasses
import random

# cupy: CuPy's default MemoryPool (what a CuPy program gets); async: cupy.cuda.MemoryAsyncPool
# (cudaMallocAsync on the device's default pool, its release threshold as CuPy leaves it);
# tidepool: tidepool.cupy.use().
ALLOCATORS = ("cupy", "async", "tidepool")


@dataclasses.dataclass(frozen=True)
class Program:
    """One benchmark program. `shapes(seed, steps)` gives each step's shape (a tuple of ints)."""

    name: str
    description: str
    steps: int  # default number of steps, warm-up included
    warmup: int  # leading steps left out of the median and p90
    schedule: str
    params: dict

    def shapes(self, seed, steps):
        rng = random.Random(f"{self.name}/{seed}")  # str seeds hash the same in every process
        p = self.params
        if self.schedule == "regrid":
            # (members, n): an n x n grid redrawn every `every` steps (the solver regrids), as many
            # ensemble members as fit the point budget.
            shapes = []
            for i in range(steps):
                if i % p["every"] == 0:
                    n = rng.randrange(p["min_n"], p["max_n"] + 1, p["multiple"])
                shapes.append((max(1, p["point_budget"] // (n * n)), n))
            return shapes
        if self.schedule == "clusters":
            # (points, dims, clusters): a new data set each step, the points fitted to a budget of
            # point-cluster distances.
            shapes = []
            for _ in range(steps):
                clusters = rng.choice(p["clusters"])
                dims = rng.choice(p["dims"])
                points = min(p["max_points"], p["distance_budget"] // clusters)
                points = rng.randrange(points // 4, points + 1, 256)
                shapes.append((points, dims, clusters))
            return shapes
        if self.schedule == "systems":
            # (batch, n): a batch of n x n systems fitted to an element budget, n new each step.
            shapes = []
            for _ in range(steps):
                n = rng.randrange(p["min_n"], p["max_n"] + 1, p["multiple"])
                shapes.append((max(1, p["element_budget"] // (n * n)), n))
            return shapes
        raise ValueError(f"{self.name}: unknown schedule {self.schedule!r}")


PROGRAMS = {p.name: p for p in (
    Program("spectral-regrid", "2-D incompressible flow (vorticity form), pseudo-spectral with cuFFT, RK2, an "
            "ensemble of fields regridded to a new resolution every 5 steps (spectral interpolation), "
            "64M grid points in all", 60, 5, "regrid",
            {"point_budget": 1 << 26, "min_n": 256, "max_n": 2048, "multiple": 128, "every": 5, "substeps": 4}),
    Program("kmeans-vary", "k-means (Lloyd, 8 iterations) on a new data set each step: points, dimensions and "
            "clusters drawn anew, distances by matrix product, centroids by scatter-add", 60, 5, "clusters",
            {"distance_budget": 1 << 28, "max_points": 1 << 21, "dims": (16, 32, 64, 128, 256),
             "clusters": (16, 64, 256, 1024), "iterations": 8}),
    Program("linalg-batch", "batched dense linear algebra of a new size each step: LU solves of a batch of "
            "systems, a QR of their stacked columns and a symmetric eigensolve (cuBLAS and cuSOLVER "
            "workspaces through the allocator)", 60, 5, "systems",
            {"element_budget": 1 << 26, "min_n": 64, "max_n": 2048, "multiple": 64}),
)}

