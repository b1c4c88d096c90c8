// libFuzzer target: a sequence of pool calls through the C API, decoded from the input's bytes, on
// a host-backed simulated GPU: default options (byte cap, release policy, compaction on the
// out-of-memory path), allocations of any size
// and lifetime on the default stream and three others (tidepool_allocate and the PyTorch and CuPy
// entry points), frees, record_stream with work queued, streams forgotten, destroyed and made
// again, release, compact, release_cached_memory, stats, the clock moving, and bad input: zero and absurd
// sizes, a wrong device, foreign, interior and already freed pointers. After every call: no crash,
// bad input refused with its status and a message, and the figures right (in use + cached = mapped,
// mapped = what the driver holds, the live count the program's, nothing unmapped under queued work,
// every live block's first and last words intact). At the end everything is freed and released and
// nothing is held.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <set>

#include "process/process_state.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"
#include "tidepool/sim.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_pool_calls: %s (last error: %s)\n", what, tidepool_last_error());
  std::abort();
}

// Reads the input a byte at a time; zeros once it is used up.
class bytes {
 public:
  bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t next() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint32_t next16() { return static_cast<std::uint32_t>(next()) | static_cast<std::uint32_t>(next()) << 8; }
  [[nodiscard]] bool done() const { return at_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

enum class entry : std::uint8_t { plain, torch, cupy };
struct live_block {
  std::size_t bytes;
  int stream;  // index into streams (0: the default stream)
  tidepool::stream_t handle;
  entry via;
  std::uint64_t tag;
};

class session {
 public:
  explicit session(bytes& in) : in_(in) {
    tidepool::detail::reset_process_for_testing();
    tidepool::sim_config config;
    config.capacity = 256 * MiB;
    config.back_with_host_memory = true;
    config.devices_with_context = {0};
    sim_ = std::make_shared<tidepool::sim_driver>(config);
    tidepool::set_default_driver(sim_);
    for (int i = 1; i < 4; ++i) {
      if (sim_->stream_create(0, &streams_[i]) != tidepool::driver_status::success) fail("stream_create");
    }
  }
  ~session() {
    for (int i = 1; i < 4; ++i) (void)sim_->stream_destroy(0, streams_[i]);
    tidepool::detail::reset_process_for_testing();
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void set_options() {
    tidepool_pool_options_t o{};
    o.struct_size = sizeof(o);
    if (tidepool_get_default_pool_options(&o) != TIDEPOOL_SUCCESS) fail("get options");
    const std::uint8_t b = in_.next();
    const std::uint64_t caps[] = {UINT64_MAX, 16 * MiB, 64 * MiB, 200 * MiB};
    o.byte_cap = caps[b & 3];
    if (b & 4) o.immediate_release = 1;
    if (b & 8) o.max_cached_bytes = 8 * MiB;
    if (b & 16) o.small_size_threshold = 64 * 1024;
    if (b & 32) o.growth_slack = 0.0;
    if (b & 64) o.thread_caches = TIDEPOOL_THREAD_CACHES_ALWAYS;  // frees and reuses through the thread's cache
    if (b & 128) o.compact_on_out_of_memory = 1;  // one thread: moving live bytes at out of memory is safe
    if (tidepool_set_default_pool_options(&o) != TIDEPOOL_SUCCESS) fail("set options");
  }

  void step() {
    switch (in_.next() % 14) {
      case 0: allocate(entry::plain); break;
      case 1: free_live(); break;
      case 2: bad_free(); break;
      case 3: record_stream(); break;
      case 4: release(); break;
      case 5: break;  // figures only (checked after every step)
      case 6: renew_stream(); break;
      case 7: sim_->advance(static_cast<double>(in_.next()) * 4.0); break;
      case 8: allocate(entry::cupy); break;
      case 9: allocate(entry::torch); break;
      case 10: release_everything(); break;
      case 11: bad_allocate(); break;
      case 12: {
        std::size_t available = 0;
        expect(tidepool_available_bytes(0, &available), TIDEPOOL_SUCCESS, "available_bytes");
        break;
      }
      case 13: compact(); break;
    }
    check();
  }

  void finish() {
    while (!live_.empty()) free_block(live_.begin()->first);
    release();
    check();
    tidepool_stats_t st = stats();
    if (st.mapped_bytes != 0 || sim_->physical_bytes(0) != 0) fail("memory held after everything was freed and released");
  }

 private:
  static void expect(tidepool_status got, tidepool_status want, const char* what) {
    if (got != want) {
      std::fprintf(stderr, "%s: %s, expected %s\n", what, tidepool_status_name(got), tidepool_status_name(want));
      fail(what);
    }
  }

  tidepool_stats_t stats() {
    tidepool_stats_t st{};
    st.struct_size = sizeof(st);
    const tidepool_status status = tidepool_stats(0, &st);
    if (status != TIDEPOOL_SUCCESS && status != TIDEPOOL_INVALID_DEVICE) fail("stats");  // invalid: no pool yet
    return st;
  }

  void check() {
    const tidepool_stats_t st = stats();
    if (st.in_use_bytes + st.cached_bytes != st.mapped_bytes) fail("in use + cached != mapped");
    if (st.mapped_bytes != sim_->physical_bytes(0)) fail("the pool's mapped bytes are not what the driver holds");
    if (st.live_allocations != live_.size()) fail("the live count is not the program's");
    if (sim_->unsafe_unmap_count() != 0) fail("memory unmapped under queued work");
  }

  std::byte* view(void* ptr, std::size_t bytes) {
    return sim_->host_view(0, reinterpret_cast<tidepool::device_address>(ptr), bytes);
  }

  void write(void* ptr, live_block& b) {
    std::byte* host = view(ptr, b.bytes);
    if (host == nullptr) fail("a new block is not wholly mapped");
    b.tag = ++tags_ * 0x9E3779B97F4A7C15ull;
    std::memcpy(host, &b.tag, std::min<std::size_t>(8, b.bytes));
    if (b.bytes >= 16) std::memcpy(host + b.bytes - 8, &b.tag, 8);
  }

  void check_block(void* ptr, const live_block& b) {
    std::byte* host = view(ptr, b.bytes);
    if (host == nullptr) fail("a live block is no longer wholly mapped");
    if (std::memcmp(host, &b.tag, std::min<std::size_t>(8, b.bytes)) != 0 ||
        (b.bytes >= 16 && std::memcmp(host + b.bytes - 8, &b.tag, 8) != 0)) {
      fail("a live block was overwritten");
    }
  }

  std::size_t size() {
    const std::uint8_t shape = in_.next();
    const std::size_t base = std::size_t{1} << (shape % 28);  // 1 B to 128 MiB
    return base + (in_.next16() * base >> 16);
  }

  void* pick_live() {
    if (live_.empty()) return nullptr;
    auto it = live_.begin();
    std::advance(it, in_.next() % live_.size());
    return it->first;
  }

  void allocate(entry via) {
    const std::size_t bytes = size();
    const int s = in_.next() % 4;
    const tidepool::stream_t handle = streams_[s];
    void* ptr = nullptr;
    tidepool_status status = TIDEPOOL_SUCCESS;
    switch (via) {
      case entry::plain:
        status = tidepool_allocate(bytes, 0, handle, (in_.next() & 1) ? TIDEPOOL_PERSISTENT : TIDEPOOL_SCRATCH, &ptr);
        break;
      case entry::torch:
        try {
          ptr = tidepool_torch_alloc(bytes, 0, handle);
        } catch (const std::exception& e) {
          // PyTorch's way: an exception whose message says why (out of memory in PyTorch's words).
          if (std::strstr(e.what(), "out of memory") == nullptr && std::strstr(e.what(), "tidepool") == nullptr) {
            fail("tidepool_torch_alloc threw without saying why");
          }
          return;
        }
        break;
      case entry::cupy:
        expect(tidepool_set_current_stream(0, handle), TIDEPOOL_SUCCESS, "set_current_stream");
        ptr = tidepool_cupy_malloc(nullptr, bytes, 0);
        if (ptr == nullptr) status = tidepool_last_status();
        break;
    }
    if (status != TIDEPOOL_SUCCESS) {
      if (status != TIDEPOOL_OUT_OF_MEMORY && status != TIDEPOOL_INVALID_SIZE) fail("an allocation failed");
      if (tidepool_last_error()[0] == '\0') fail("a failed allocation without a message");
      return;
    }
    if (ptr == nullptr) fail("a successful allocation returned NULL");
    if (reinterpret_cast<std::uintptr_t>(ptr) % 256 != 0) fail("an allocation not aligned to 256 bytes");
    if (live_.count(ptr) != 0) fail("a live pointer was handed out again");
    live_block b{bytes, s, handle, via, 0};
    write(ptr, b);
    live_.emplace(ptr, b);
    freed_.erase(ptr);
  }

  void free_block(void* ptr) {
    const live_block b = live_.at(ptr);
    check_block(ptr, b);
    switch (b.via) {
      case entry::plain: expect(tidepool_deallocate(ptr, 0, b.handle), TIDEPOOL_SUCCESS, "deallocate"); break;
      case entry::torch: tidepool_torch_free(ptr, b.bytes, 0, b.handle); break;
      case entry::cupy: tidepool_cupy_free(nullptr, ptr, 0); break;
    }
    live_.erase(ptr);
    freed_.insert(ptr);
  }

  void free_live() {
    if (void* ptr = pick_live()) free_block(ptr);
  }

  void bad_free() {
    const std::uint8_t kind = in_.next() % 4;
    if (kind == 0) {  // interior pointer of a live block
      void* ptr = pick_live();
      if (ptr == nullptr || live_.at(ptr).bytes <= 256) return;
      const tidepool_status status = tidepool_deallocate(static_cast<char*>(ptr) + 256, TIDEPOOL_ANY_DEVICE, nullptr);
      if (status != TIDEPOOL_INVALID_POINTER && status != TIDEPOOL_DOUBLE_FREE) fail("an interior pointer was freed");
    } else if (kind == 1 && !freed_.empty()) {  // freed before, not live now
      auto it = freed_.begin();
      std::advance(it, in_.next() % freed_.size());
      const tidepool_status status = tidepool_deallocate(*it, TIDEPOOL_ANY_DEVICE, nullptr);
      if (status != TIDEPOOL_DOUBLE_FREE && status != TIDEPOOL_INVALID_POINTER) fail("a double free was accepted");
    } else if (kind == 2) {  // anything
      std::uintptr_t value = 0;
      for (int i = 0; i < 8; ++i) value = value << 8 | in_.next();
      void* ptr = reinterpret_cast<void*>(value);
      if (ptr == nullptr || live_.count(ptr) != 0) return;
      const tidepool_status status = tidepool_deallocate(ptr, TIDEPOOL_ANY_DEVICE, nullptr);
      if (status == TIDEPOOL_SUCCESS) fail("a foreign pointer was freed");
    } else {  // a live block on a device that does not exist
      void* ptr = pick_live();
      if (ptr == nullptr) return;
      expect(tidepool_deallocate(ptr, 7, nullptr), TIDEPOOL_INVALID_DEVICE, "deallocate on device 7");
    }
    if (tidepool_last_error()[0] == '\0') fail("a refusal without a message");
  }

  void bad_allocate() {
    void* ptr = reinterpret_cast<void*>(0x1);
    const std::uint8_t kind = in_.next() % 3;
    if (kind == 0) expect(tidepool_allocate(0, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_INVALID_SIZE, "size 0");
    if (kind == 1) {
      expect(tidepool_allocate(std::size_t{1} << 62, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_INVALID_SIZE,
             "absurd size");
    }
    if (kind == 2) expect(tidepool_allocate(512, 7, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_INVALID_DEVICE, "device 7");
    if (ptr != nullptr) fail("a refused allocation left *out set");
  }

  void record_stream() {
    void* ptr = pick_live();
    if (ptr == nullptr) return;
    const int s = 1 + in_.next() % 3;
    sim_->launch(0, streams_[s], static_cast<double>(in_.next()), reinterpret_cast<tidepool::device_address>(ptr),
                 live_.at(ptr).bytes);
    expect(tidepool_record_stream(ptr, 0, streams_[s]), TIDEPOOL_SUCCESS, "record_stream");
  }

  void release() {
    std::size_t bytes = 0;
    const tidepool_status status = tidepool_release(0, &bytes);
    if (status != TIDEPOOL_SUCCESS && status != TIDEPOOL_INVALID_DEVICE) fail("release");
  }

  void compact() {
    // Live blocks' bytes move to new handles: check() after it reads their first and last words.
    std::size_t bytes = 0;
    expect(tidepool_compact(0, &bytes), TIDEPOOL_SUCCESS, "compact");
  }

  void release_everything() {
    std::size_t bytes = 0;
    expect(tidepool_release_cached_memory(&bytes), TIDEPOOL_SUCCESS, "release_cached_memory");
  }

  void renew_stream() {
    // Forgotten, destroyed, made again: blocks allocated on the old handle are freed naming it.
    const int s = 1 + in_.next() % 3;
    expect(tidepool_forget_stream(0, streams_[s]), TIDEPOOL_SUCCESS, "forget_stream");
    if (sim_->stream_destroy(0, streams_[s]) != tidepool::driver_status::success) fail("stream_destroy");
    if (sim_->stream_create(0, &streams_[s]) != tidepool::driver_status::success) fail("stream_create");
  }

  bytes& in_;
  std::shared_ptr<tidepool::sim_driver> sim_;
  tidepool::stream_t streams_[4] = {};
  std::map<void*, live_block> live_;
  std::set<void*> freed_;
  std::uint64_t tags_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 512) return 0;  // long sequences add little and slow the search
  bytes in(data, size);
  session s(in);
  s.set_options();
  while (!in.done()) s.step();
  s.finish();
  return 0;
}
