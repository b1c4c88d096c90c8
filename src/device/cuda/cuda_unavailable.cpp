// cuda_unavailable.cpp: make_cuda_driver() where the library was built without the CUDA
// toolkit's headers. The library still links and runs on sim; asking for CUDA says why it can't.
#include "tidepool/driver.hpp"
#include "tidepool/errors.hpp"

namespace tidepool {

namespace {
constexpr const char* reason = "tidepool was built without the CUDA toolkit headers (cuda.h)";
}

std::shared_ptr<driver> make_cuda_driver() { throw error(error_code::unavailable, reason); }

std::string cuda_driver_unavailable_reason() { return reason; }

}  // namespace tidepool
