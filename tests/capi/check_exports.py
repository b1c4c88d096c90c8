"""Checks what libtidepool.so exports and what it needs at run time.

    python3 check_exports.py NM READELF LIBRARY C_API_HEADER

A library that a Python process loads next to PyTorch or CuPy must export its public API and
nothing else, and must not pull shared libraries of its own into the process: its dynamic symbol
table holds exactly the functions c_api.h declares, plus C++ symbols of namespace tidepool that
are not tidepool::detail (the public classes of include/tidepool/, their type information and
virtual tables); no fmt, zlib, nlohmann, standard library instantiation, replay layer or detail
symbol; and its NEEDED entries are the C and C++ runtimes only (no libfmt, no libz).
Exits 1 and prints every offender otherwise.
"""

import re
import subprocess
import sys

# Runtime libraries the library may need: C, C++, math, the loader, and the sanitizer runtimes of
# the instrumented build.
ALLOWED_NEEDED = re.compile(r"^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libasan|libubsan)"
                            r"\.so(\.\d+)*$|^ld-linux.*\.so(\.\d+)*$")
CXX_PREFIXES = ("typeinfo name for ", "typeinfo for ", "vtable for ")
# Public C++ symbols that must be there (a table emptied by mistake must not pass).
REQUIRED_CXX = (
    "tidepool::pool::allocate(",
    "tidepool::pool::deallocate(",
    "tidepool::sim_driver::sim_driver(",
    "tidepool::make_cuda_driver()",
    "tidepool::device_pool(int)",
    "tidepool::add_reclaim_hook(",
    "typeinfo for tidepool::error",
    "typeinfo for tidepool::out_of_memory",
    "vtable for tidepool::sim_driver",
)


def run(*command):
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def declared_c_functions(header):
    text = open(header, encoding="utf-8").read()
    return set(re.findall(r"TIDEPOOL_API\b[^;(]*?\b(tidepool_\w+)\s*\(", text))


def defined_symbols(nm, library):
    symbols = []
    for line in run(nm, "-D", "--defined-only", "-C", library).splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3:
            symbols.append(parts[2])
    return symbols


def public_cxx(name):
    for prefix in CXX_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return (name.startswith("tidepool::") and not name.startswith("tidepool::detail::")
            and not name.startswith("tidepool::replay::"))


def needed_libraries(readelf, library):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run(readelf, "-d", library))


def main(nm, readelf, library, header):
    problems = []
    declared = declared_c_functions(header)
    if len(declared) < 20:
        problems.append(f"found only {len(declared)} functions in {header}: the header parse is wrong")
    symbols = defined_symbols(nm, library)
    exported_c = {s for s in symbols if re.fullmatch(r"tidepool_\w+", s)}
    for name in sorted(declared - exported_c):
        problems.append(f"declared in c_api.h but not exported: {name}")
    for name in sorted(exported_c - declared):
        problems.append(f"exported but not declared in c_api.h: {name}")
    for name in symbols:
        if name not in exported_c and not public_cxx(name):
            problems.append(f"exported and not public API: {name}")
    for required in REQUIRED_CXX:
        if not any(s.startswith(required) for s in symbols):
            problems.append(f"public C++ symbol not exported: {required}...")
    for needed in needed_libraries(readelf, library):
        if not ALLOWED_NEEDED.match(needed):
            problems.append(f"needs a shared library of its own: {needed}")
    for problem in problems:
        print(problem)
    print(f"{library}: {len(symbols)} exported symbols ({len(exported_c)} C), "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
