"""The two ways the package is installed, each checked end to end on sim: `pip install python/`
(the package alone; the library from $TIDEPOOL_LIBRARY) and `cmake --install` (the package with a
copy of libtidepool.so beside it, found with no variable set)."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from sim_support import PYTHON_ROOT

# Allocates and frees on the simulated GPU, and says where the package and library came from.
PROBE = (
    "import tidepool, tidepool._library as l\n"
    "p = tidepool.allocate(1 << 20)\n"
    "tidepool.deallocate(p)\n"
    "print(tidepool.__file__)\n"
    "print(tidepool.stats(0).allocations)\n"
)


def _probe(site, **variables):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TIDEPOOL_LIBRARY")}
    env.update(TIDEPOOL_DEVICE="sim", PYTHONPATH=site, **variables)
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                            timeout=120, cwd="/")
    assert result.returncode == 0, f"probe failed:\n{result.stdout}\n{result.stderr}"
    package_file, allocations = result.stdout.split()
    return package_file, int(allocations)


def test_pip_install_of_the_package_folder(tmp_path):
    library = os.environ.get("TIDEPOOL_LIBRARY")
    if not library:
        pytest.skip("TIDEPOOL_LIBRARY is not set (scripts/test.sh sets it)")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
         "--target", str(site), PYTHON_ROOT],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    package_file, allocations = _probe(str(site), TIDEPOOL_LIBRARY=library)
    assert package_file.startswith(str(site))
    assert allocations == 1


def test_cmake_install_puts_the_library_beside_the_package(tmp_path):
    library = os.environ.get("TIDEPOOL_LIBRARY")
    if not library or shutil.which("cmake") is None:
        pytest.skip("needs TIDEPOOL_LIBRARY (in a CMake build folder) and cmake")
    build = os.path.dirname(os.path.dirname(os.path.realpath(library)))  # $BUILD/src/lib... -> $BUILD
    prefix = tmp_path / "prefix"
    result = subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"cmake --install failed:\n{result.stdout}\n{result.stderr}"
    bundled = glob.glob(str(prefix / "**" / "tidepool" / "libtidepool.so"), recursive=True)
    assert len(bundled) == 1, f"expected one tidepool/libtidepool.so under {prefix}: {bundled}"
    site = os.path.dirname(os.path.dirname(bundled[0]))
    package_file, allocations = _probe(site)  # no TIDEPOOL_LIBRARY: the copy beside the package
    assert package_file.startswith(site)
    assert allocations == 1
