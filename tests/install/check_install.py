"""Installs a tidepool build into a fresh prefix and uses it from outside, as a user would.

    python3 check_install.py --build BUILD --version X.Y.Z --nm NM --readelf READELF
                             --cxx CXX --cc CC [--flags "FLAGS"] [--work DIR]

Checks, in order: `cmake --install BUILD --prefix P` lays out the library with its SONAME
links, the headers, tidepoolConfig.cmake + version file, tidepool.pc and the `tidepool` command
(whose --version is X.Y.Z); the installed library exports the public API only and needs only the
C and C++ runtimes (tests/capi/check_exports.py); the consumer project (consumer/) configures
with find_package(tidepool CONFIG REQUIRED) against P, builds, and its C++ and C programs run on
the simulated GPU with no variable pointing at the library (and, where CMake finds CCCL, a
program using tidepool::memory_resource); and consumer.c compiles and runs with
nothing but `pkg-config --cflags --libs tidepool`. FLAGS (the sanitizer flags of an instrumented
build) go to every compile and link. Exits 1 with what failed.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "capi"))
import check_exports  # noqa: E402  (the same rules as the build tree's library)


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {shlex.join(command)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def key_values(text):
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def check_layout(prefix, libdir, version):
    major = version.split(".")[0]
    lib = os.path.join(prefix, libdir)
    real = os.path.join(lib, f"libtidepool.so.{version}")
    expected = {
        os.path.join(lib, f"libtidepool.so.{major}"): f"libtidepool.so.{version}",
        os.path.join(lib, "libtidepool.so"): f"libtidepool.so.{major}",
    }
    problems = []
    if not os.path.isfile(real) or os.path.islink(real):
        problems.append(f"{real} is not a file")
    for link, target in expected.items():
        if not os.path.islink(link) or os.readlink(link) != target:
            problems.append(f"{link} is not a link to {target}")
    for path in ("include/tidepool/tidepool.hpp", "include/tidepool/c_api.h",
                 f"{libdir}/cmake/tidepool/tidepoolConfig.cmake",
                 f"{libdir}/cmake/tidepool/tidepoolConfigVersion.cmake",
                 f"{libdir}/cmake/tidepool/tidepoolTargets.cmake",
                 f"{libdir}/pkgconfig/tidepool.pc", "bin/tidepool"):
        if not os.path.isfile(os.path.join(prefix, path)):
            problems.append(f"{path} is not installed")
    return problems, real


def main():
    parser = argparse.ArgumentParser()
    for name in ("--build", "--version", "--nm", "--readelf", "--cxx", "--cc"):
        parser.add_argument(name, required=True)
    parser.add_argument("--flags", default="")
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="tidepool-install-")
    shutil.rmtree(work, ignore_errors=True)
    prefix = os.path.join(work, "prefix")
    env = {k: v for k, v in os.environ.items() if k not in ("TIDEPOOL_LIBRARY", "LD_LIBRARY_PATH")}
    env["TIDEPOOL_DEVICE"] = "sim"

    run(["cmake", "--install", args.build, "--prefix", prefix])
    libdir = next(d for d in ("lib", "lib64", "lib/x86_64-linux-gnu")
                  if os.path.exists(os.path.join(prefix, d, "libtidepool.so")))
    problems, library = check_layout(prefix, libdir, args.version)
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", run([args.readelf, "-d", library]))
    expected_soname = f"libtidepool.so.{args.version.split('.')[0]}"
    if not soname or soname.group(1) != expected_soname:
        problems.append(f"SONAME is {soname.group(1) if soname else None}, not {expected_soname}")
    if check_exports.main(args.nm, args.readelf, library,
                          os.path.join(prefix, "include/tidepool/c_api.h")) != 0:
        problems.append("the installed library exports or needs more than its public API (above)")
    cli = run([os.path.join(prefix, "bin/tidepool"), "--version"], env=env).strip()
    if cli != f"tidepool {args.version}":
        problems.append(f"`tidepool --version` printed {cli!r}")

    # The consumer project, with find_package: the imported target carries the library's path,
    # so the programs run with no LD_LIBRARY_PATH.
    consumer = os.path.join(work, "consumer")
    run(["cmake", "-S", os.path.join(HERE, "consumer"), "-B", consumer, "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={prefix}", f"-DCMAKE_CXX_COMPILER={args.cxx}", f"-DCMAKE_C_COMPILER={args.cc}",
         f"-DCMAKE_CXX_FLAGS={args.flags}", f"-DCMAKE_C_FLAGS={args.flags}",
         f"-DCMAKE_EXE_LINKER_FLAGS={args.flags}"])
    run(["cmake", "--build", consumer])
    cxx = key_values(run([os.path.join(consumer, "cxx_consumer")], env=env))
    if cxx.get("shared_driver") != "sim" or cxx.get("shared_allocations") != "1":
        problems.append(f"the C++ consumer's process pool is not sim's with one allocation: {cxx}")
    mr_consumer = os.path.join(consumer, "mr_consumer")  # built where CMake found CCCL
    if os.path.exists(mr_consumer):
        mr = key_values(run([mr_consumer], env=env))
        print(f"memory_resource consumer: CCCL {mr.get('cccl')}")
        if mr.get("allocations") != "2":
            problems.append(f"the memory_resource consumer: {mr}")
    else:
        print("memory_resource consumer not built: CMake found no CCCL")
    c = key_values(run([os.path.join(consumer, "c_consumer")], env=env))
    if c.get("version") != args.version:
        problems.append(f"the C consumer sees version {c.get('version')}")

    # pkg-config alone: compile and link flags from tidepool.pc; the loader is told where the
    # library is (a pkg-config build carries no run path).
    pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(prefix, libdir, "pkgconfig"))
    pc_flags = shlex.split(run(["pkg-config", "--cflags", "--libs", "tidepool"], env=pc_env))
    program = os.path.join(work, "pkg_config_consumer")
    run([args.cc, *shlex.split(args.flags), os.path.join(HERE, "consumer", "consumer.c"), "-o", program, *pc_flags])
    pc = key_values(run([program], env=dict(env, LD_LIBRARY_PATH=os.path.join(prefix, libdir))))
    if pc.get("allocations") != "1":
        problems.append(f"the pkg-config consumer: {pc}")
    if run(["pkg-config", "--modversion", "tidepool"], env=pc_env).strip() != args.version:
        problems.append("pkg-config --modversion tidepool is not the project's version")

    for problem in problems:
        print(problem)
    print(f"installed into {prefix}: {len(problems)} problem(s)")
    if not problems and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
