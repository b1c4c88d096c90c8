"""Loading libtidepool.so: through ctypes directly, through the package, and the clear error when
it cannot be found."""

import ctypes
import os
import subprocess
import sys

from sim_support import run_script, sim_environment

C_API_SYMBOLS = [
    "tidepool_version", "tidepool_last_error", "tidepool_last_status", "tidepool_status_name",
    "tidepool_device_count", "tidepool_has_context", "tidepool_allocate", "tidepool_deallocate",
    "tidepool_record_stream", "tidepool_set_current_stream", "tidepool_get_current_stream",
    "tidepool_torch_alloc", "tidepool_torch_free", "tidepool_cupy_malloc", "tidepool_cupy_free",
    "tidepool_stats", "tidepool_reset_peak_stats", "tidepool_release", "tidepool_compact",
    "tidepool_release_cached_memory",
    "tidepool_available_bytes", "tidepool_set_byte_cap", "tidepool_byte_cap",
    "tidepool_add_reclaim_hook", "tidepool_remove_reclaim_hook",
    "tidepool_set_default_pool_options", "tidepool_get_default_pool_options",
]


def test_plain_ctypes_finds_every_entry_point():
    lib = ctypes.CDLL(os.environ["TIDEPOOL_LIBRARY"])
    for name in C_API_SYMBOLS:
        assert getattr(lib, name), name
    lib.tidepool_version.restype = ctypes.c_char_p
    assert lib.tidepool_version().decode().count(".") == 2


def test_package_loads_the_library_named_by_the_environment(tp):
    assert os.path.samefile(tp.library_path(), os.environ["TIDEPOOL_LIBRARY"])
    assert tp.version() == tp._load().tidepool_version().decode()
    assert tp.device_count() == 1


def test_missing_library_is_a_clear_error():
    env = sim_environment(TIDEPOOL_LIBRARY="/nonexistent/libtidepool.so")
    script = ("import tidepool\n"
              "try:\n"
              "    tidepool.version()\n"
              "except tidepool.LibraryNotFoundError as e:\n"
              "    print('refused:', e)\n")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout
    assert "/nonexistent/libtidepool.so" in result.stdout
    assert "TIDEPOOL_LIBRARY" in result.stdout


def test_import_loads_no_framework():
    out = run_script("""
        import sys, tidepool
        tidepool.version()
        print('torch' in sys.modules, 'cupy' in sys.modules)
    """)
    assert out.split() == ["False", "False"]


def test_framework_modules_load_lazily_and_need_their_framework():
    out = run_script("""
        import importlib.util, sys, tidepool
        print(tidepool.torch.is_used(), tidepool.cupy.is_used())
        for name in ("torch", "cupy"):
            if importlib.util.find_spec(name) is not None:
                print(name, "installed")
                continue
            try:
                getattr(tidepool, name).use()
            except ImportError as e:
                print(name, "missing", type(e).__name__)
        print("torch" in sys.modules, "cupy" in sys.modules)
    """)
    lines = out.strip().splitlines()
    assert lines[0] == "False False"
    assert all(line.split()[1] in ("installed", "missing") for line in lines[1:3])
    if "installed" not in out:
        assert lines[3] == "False False"
