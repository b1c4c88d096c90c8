"""Builds the tidepool package with its library: `pip install --no-build-isolation ./python`.

The package is pure Python over ctypes; what it loads, libtidepool.so, is built here with CMake
from the source tree around this folder and copied into the package, so an installed package
needs no compiler and no variable at import. Where the library comes from, in order:

  TIDEPOOL_CMAKE_BUILD_DIR=DIR   a CMake build folder: if it is configured already (a
                                 CMakeCache.txt), only the `tidepool` target is built there, with
                                 the folder's own settings; else it is configured (Release, no
                                 tests, no benchmarks) and built. Default: a folder in setuptools'
                                 build_temp, so a second `pip install` rebuilds incrementally.
  TIDEPOOL_CMAKE_ARGS="..."      more arguments for that first configuration.

The wheel is tagged py3-none-<platform>: it holds a native library but no Python extension, so
one wheel serves every Python 3 of that platform.
"""

import os
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools 70.1 and later carry bdist_wheel; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)  # the repository: python/..
LIBRARY_FILE = "libtidepool.so"


def _is_tidepool_source(folder):
    try:
        with open(os.path.join(folder, "CMakeLists.txt"), encoding="utf-8") as f:
            return "project(tidepool " in f.read()
    except OSError:
        return False


def _run(command):
    print("tidepool:", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def build_library(build_temp):
    """Builds libtidepool.so with CMake; returns the path of the built file (not a link)."""
    if not _is_tidepool_source(SOURCE):
        raise SystemExit(
            f"tidepool: {SOURCE} is not tidepool's source tree, so libtidepool.so cannot be built "
            "here. Install from a source checkout: pip install --no-build-isolation ./python")
    if shutil.which("cmake") is None:
        raise SystemExit("tidepool: building libtidepool.so needs cmake (and ninja or make, and a "
                         "C++20 compiler): run scripts/deps.sh, or apt-get install cmake ninja-build g++")
    build = os.path.abspath(os.environ.get("TIDEPOOL_CMAKE_BUILD_DIR") or os.path.join(build_temp, "cmake"))
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", SOURCE, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release",
              "-DTIDEPOOL_BUILD_TESTS=OFF", "-DTIDEPOOL_BUILD_BENCH=OFF",
              *shlex.split(os.environ.get("TIDEPOOL_CMAKE_ARGS", ""))])
    _run(["cmake", "--build", build, "--target", "tidepool", "--parallel", str(os.cpu_count() or 1)])
    built = os.path.join(build, "src", LIBRARY_FILE)
    if not os.path.exists(built):
        raise SystemExit(f"tidepool: the CMake build in {build} made no {built}")
    return os.path.realpath(built)  # libtidepool.so -> .so.0 -> .so.X.Y.Z: the file itself


class BuildPyWithLibrary(build_py):
    """build_py, then the library built by CMake copied into the package as one plain file."""

    def run(self):
        super().run()
        built = build_library(os.path.abspath(self.get_finalized_command("build").build_temp))
        target = os.path.join(self.build_lib, "tidepool", LIBRARY_FILE)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        os.chmod(target, 0o755)


class PackageWithLibrary(Distribution):
    """Says the package is not pure Python, so it installs into platlib (the wheel's root)."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for this platform (it holds a native library) and any Python 3 (no extension)."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=PackageWithLibrary, cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
