"""The ways the package is installed, each checked end to end on sim, each found with no variable
set: `pip install ./python` (setup.py builds libtidepool.so with CMake and puts it inside the
package), the wheel of scripts/wheel.sh in a fresh virtual environment, and `cmake --install`
(the package with a copy of libtidepool.so beside it).

The wheel is built from a fresh CMake folder (the one real build of these tests), unless
$TIDEPOOL_TEST_WHEEL_BUILD_DIR names one to reuse (scripts/test.sh does, so its two suites build
it once). `pip install ./python` reuses the suite's own build folder (where $TIDEPOOL_LIBRARY is).
"""

import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from sim_support import PYTHON_ROOT

REPOSITORY = os.path.dirname(PYTHON_ROOT)

# Allocates and frees on the simulated GPU, and says where the package and library came from.
PROBE = (
    "import importlib.metadata, tidepool\n"
    "p = tidepool.allocate(1 << 20)\n"
    "tidepool.deallocate(p)\n"
    "print(tidepool.__file__)\n"
    "print(tidepool.library_path())\n"
    "print(tidepool.stats(0).allocations)\n"
    "print(tidepool.version())\n"
    "try:\n"
    "    print(importlib.metadata.version('tidepool'))\n"
    "except importlib.metadata.PackageNotFoundError:\n"
    "    print('-')\n"
)


def _clean_environment(keep_preload=True):
    """os.environ without what would point the package at a library, or its build at a folder."""
    dropped = {"PYTHONPATH", "TIDEPOOL_LIBRARY", "TIDEPOOL_CMAKE_BUILD_DIR", "TIDEPOOL_CMAKE_ARGS"}
    if not keep_preload:
        dropped |= {"LD_PRELOAD"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def _probe(python, site=None, keep_preload=True):
    env = _clean_environment(keep_preload)
    env["TIDEPOOL_DEVICE"] = "sim"
    if site:
        env["PYTHONPATH"] = site
    result = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True,
                            timeout=120, cwd="/")
    assert result.returncode == 0, f"probe failed:\n{result.stdout}\n{result.stderr}"
    package_file, library, allocations, version, distribution = result.stdout.split()
    return package_file, library, int(allocations), version, distribution


def _suite_build_folder():
    library = os.environ.get("TIDEPOOL_LIBRARY")
    if not library:
        pytest.skip("TIDEPOOL_LIBRARY is not set (scripts/test.sh sets it)")
    return os.path.dirname(os.path.dirname(os.path.realpath(library)))  # $BUILD/src/lib... -> $BUILD


def _run(command, env, timeout=900):
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_pip_install_builds_the_library_into_the_package(tmp_path):
    build = _suite_build_folder()
    site = tmp_path / "site"
    env = _clean_environment(keep_preload=False)
    env["TIDEPOOL_CMAKE_BUILD_DIR"] = build  # configured already: setup.py only builds the target
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
          "--target", str(site), PYTHON_ROOT], env)
    bundled = site / "tidepool" / "libtidepool.so"
    assert bundled.is_file() and not bundled.is_symlink()
    package_file, library, allocations, _, _ = _probe(sys.executable, str(site))
    assert package_file.startswith(str(site))
    assert library == str(bundled)
    assert allocations == 1


def test_wheel_installs_into_a_fresh_virtual_environment(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("building the wheel needs cmake")
    env = _clean_environment(keep_preload=False)
    env["WHEEL_DIR"] = str(tmp_path / "dist")
    env["BUILD_DIR"] = os.environ.get("TIDEPOOL_TEST_WHEEL_BUILD_DIR") or str(tmp_path / "cmake")
    env["PYTHON"] = sys.executable
    _run([os.path.join(REPOSITORY, "scripts", "wheel.sh")], env)
    wheels = glob.glob(str(tmp_path / "dist" / "*.whl"))
    assert len(wheels) == 1, wheels
    name = os.path.basename(wheels[0])
    assert name.startswith("tidepool-") and "-py3-none-linux_" in name, name
    with zipfile.ZipFile(wheels[0]) as wheel:
        info = wheel.getinfo("tidepool/libtidepool.so")
        assert info.external_attr >> 28 != 0o12  # a file, not a link
        assert wheel.read(info.filename)[:4] == b"\x7fELF"
    print(f"wheel {name}: {os.path.getsize(wheels[0])} bytes")

    venv = tmp_path / "venv"
    # --system-site-packages: pip and setuptools offline, from Debian's packages.
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], env)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", wheels[0]], env)
    package_file, library, allocations, version, distribution = _probe(python, keep_preload=False)
    assert package_file.startswith(str(venv))
    assert library.startswith(str(venv)) and library.endswith("tidepool/libtidepool.so")
    assert allocations == 1
    assert version == distribution  # the library CMake built and the package's metadata agree


def test_cmake_install_puts_the_library_beside_the_package(tmp_path):
    build = _suite_build_folder()
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    prefix = tmp_path / "prefix"
    _run(["cmake", "--install", build, "--prefix", str(prefix)], dict(os.environ), timeout=300)
    bundled = glob.glob(str(prefix / "**" / "tidepool" / "libtidepool.so"), recursive=True)
    assert len(bundled) == 1, f"expected one tidepool/libtidepool.so under {prefix}: {bundled}"
    site = os.path.dirname(os.path.dirname(bundled[0]))
    package_file, library, allocations, _, _ = _probe(sys.executable, site)  # no TIDEPOOL_LIBRARY
    assert package_file.startswith(site)
    assert library == bundled[0]
    assert allocations == 1
