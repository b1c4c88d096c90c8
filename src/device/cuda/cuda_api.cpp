// cuda_api.cpp: loads libcuda.so.1 at run time and fills the entry-point table (cuda_api.hpp).
#include "device/cuda/cuda_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <mutex>

namespace tidepool::detail {
namespace {

// cuGetProcAddress as of CUDA 12 (exported as cuGetProcAddress_v2): the last argument says
// whether the symbol was found, or found only in a newer version than the one asked for.
using get_proc_address_fn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult*);
using init_fn = CUresult (*)(unsigned int);

// The name of `result` from the table being loaded (cuda_error_name would recurse into load()).
std::string error_name(const cuda_api& api, CUresult result) {
  const char* name = nullptr;
  if (api.cuGetErrorName != nullptr) api.cuGetErrorName(result, &name);
  return fmt::format("{} ({})", name ? name : "CUDA error", static_cast<int>(result));
}

struct loaded_driver {
  cuda_api api{};
  std::string failure;  // empty when api is usable
};

// Looks up every entry point; returns the first missing required one, or "" when all are there.
std::string resolve_entry_points(get_proc_address_fn get_proc, cuda_api& api) {
  std::string missing;
  const auto resolve = [&](const char* symbol, void** slot, int version, bool required) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult result = get_proc(symbol, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (result != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) {
      *slot = nullptr;
      if (required && missing.empty()) {
        missing = fmt::format("libcuda.so.1 has no {} for CUDA {} (cuGetProcAddress: {}, status {})",
                              symbol, version, error_name(api, result), static_cast<int>(found));
      }
    }
  };
#define TIDEPOOL_CUDA_RESOLVE(name, version, required) \
  resolve(#name, reinterpret_cast<void**>(&api.name), version, required);
  TIDEPOOL_CUDA_FUNCTIONS(TIDEPOOL_CUDA_RESOLVE)
#undef TIDEPOOL_CUDA_RESOLVE
  return missing;
}

loaded_driver load() {
  loaded_driver out;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace, so a program that also
  // links libcuda (PyTorch, CuPy) keeps its own binding; both share the one loaded copy.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    out.failure = fmt::format("cannot load libcuda.so.1 (no NVIDIA driver?): {}", why ? why : "unknown");
    return out;
  }
  // The library stays loaded for the life of the process: pools may outlive any one owner.
  auto init = reinterpret_cast<init_fn>(dlsym(library, "cuInit"));
  auto get_proc = reinterpret_cast<get_proc_address_fn>(dlsym(library, "cuGetProcAddress_v2"));
  if (init == nullptr || get_proc == nullptr) {
    out.failure = "libcuda.so.1 lacks cuInit or cuGetProcAddress_v2 (driver older than CUDA 12)";
    return out;
  }
  if (const CUresult result = init(0); result != CUDA_SUCCESS) {
    out.failure = fmt::format("cuInit failed: CUresult {}", static_cast<int>(result));
    return out;
  }
  out.failure = resolve_entry_points(get_proc, out.api);
  if (!out.failure.empty()) return out;
  if (const CUresult result = out.api.cuDriverGetVersion(&out.api.driver_version); result != CUDA_SUCCESS) {
    out.failure = fmt::format("cuDriverGetVersion failed: {}", error_name(out.api, result));
  }
  return out;
}

const loaded_driver& loaded() {
  static const loaded_driver instance = load();  // thread-safe initialisation, once
  return instance;
}

}  // namespace

const cuda_api* cuda() {
  const loaded_driver& driver = loaded();
  return driver.failure.empty() ? &driver.api : nullptr;
}

const std::string& cuda_load_failure() { return loaded().failure; }

std::string cuda_error_name(CUresult result) { return error_name(loaded().api, result); }

}  // namespace tidepool::detail
