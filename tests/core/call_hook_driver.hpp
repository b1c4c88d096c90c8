// A driver that forwards every call to a simulated GPU and first runs a hook given the call's
// kind and size: a slow driver call injected into the sim (a test holds one kind of call until it
// lets it go, a benchmark sleeps for a call's modelled time), so that what other threads can do
// while one thread is inside a driver call can be seen on sim.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "tidepool/sim.hpp"

namespace tidepool::testing {

class call_hook_driver : public driver {
 public:
  using hook = std::function<void(driver_call call, std::size_t bytes)>;
  call_hook_driver(std::shared_ptr<sim_driver> sim, hook before_call)
      : sim_(std::move(sim)), before_call_(std::move(before_call)) {}

  std::string name() const override { return sim_->name(); }
  int device_count() override { return sim_->device_count(); }
  bool has_context(int device) override { return sim_->has_context(device); }
  driver_status open_context(int device) override { return sim_->open_context(device); }
  bool supports_virtual_memory(int device) override { return sim_->supports_virtual_memory(device); }
  std::size_t granularity(int device) override { return sim_->granularity(device); }
  driver_status address_reserve(int device, std::size_t size, std::size_t alignment, device_address* out) override {
    pass(driver_call::address_reserve, size);
    return sim_->address_reserve(device, size, alignment, out);
  }
  driver_status address_free(int device, device_address address, std::size_t size) override {
    pass(driver_call::address_free, size);
    return sim_->address_free(device, address, size);
  }
  driver_status mem_create(int device, std::size_t size, physical_handle* out) override {
    pass(driver_call::mem_create, size);
    return sim_->mem_create(device, size, out);
  }
  driver_status mem_release(int device, physical_handle handle) override {
    pass(driver_call::mem_release, 0);
    return sim_->mem_release(device, handle);
  }
  driver_status mem_map(int device, device_address address, std::size_t size, physical_handle handle) override {
    pass(driver_call::mem_map, size);
    return sim_->mem_map(device, address, size, handle);
  }
  driver_status mem_set_access(int device, device_address address, std::size_t size, int peer) override {
    pass(driver_call::mem_set_access, size);
    return sim_->mem_set_access(device, address, size, peer);
  }
  driver_status mem_unmap(int device, device_address address, std::size_t size) override {
    pass(driver_call::mem_unmap, size);
    return sim_->mem_unmap(device, address, size);
  }
  driver_status mem_alloc(int device, std::size_t size, device_address* out) override {
    pass(driver_call::mem_alloc, size);
    return sim_->mem_alloc(device, size, out);
  }
  driver_status mem_free(int device, device_address address) override {
    pass(driver_call::mem_free, 0);
    return sim_->mem_free(device, address);
  }
  device_memory_info memory_info(int device) override { return sim_->memory_info(device); }
  driver_status stream_create(int device, stream_t* out) override { return sim_->stream_create(device, out); }
  driver_status stream_destroy(int device, stream_t stream) override { return sim_->stream_destroy(device, stream); }
  bool stream_on_device(stream_t stream, int device) override { return sim_->stream_on_device(stream, device); }
  driver_status event_create(int device, event_t* out) override { return sim_->event_create(device, out); }
  driver_status event_destroy(int device, event_t event) override { return sim_->event_destroy(device, event); }
  driver_status event_record(int device, event_t event, stream_t stream) override {
    pass(driver_call::event_record, 0);
    return sim_->event_record(device, event, stream);
  }
  driver_status event_query(int device, event_t event) override { return sim_->event_query(device, event); }
  driver_status event_synchronize(int device, event_t event) override {
    pass(driver_call::event_synchronize, 0);
    return sim_->event_synchronize(device, event);
  }
  driver_status stream_wait_event(int device, stream_t stream, event_t event) override {
    return sim_->stream_wait_event(device, stream, event);
  }
  driver_status stream_synchronize(int device, stream_t stream) override {
    pass(driver_call::stream_synchronize, 0);
    return sim_->stream_synchronize(device, stream);
  }
  driver_status device_synchronize(int device) override {
    pass(driver_call::device_synchronize, 0);
    return sim_->device_synchronize(device);
  }
  std::size_t trim_async_pools(int device) override {
    pass(driver_call::async_pool_trim, 0);
    return sim_->trim_async_pools(device);
  }
  driver_status host_alloc(int device, std::size_t bytes, void** out) override {
    pass(driver_call::host_alloc, bytes);
    return sim_->host_alloc(device, bytes, out);
  }
  driver_status host_free(int device, void* host) override {
    pass(driver_call::host_free, 0);
    return sim_->host_free(device, host);
  }
  driver_status copy_to_host(int device, void* destination, device_address source, std::size_t bytes,
                             stream_t stream) override {
    pass(driver_call::copy_to_host, bytes);
    return sim_->copy_to_host(device, destination, source, bytes, stream);
  }
  driver_status copy_to_device(int device, device_address destination, const void* source, std::size_t bytes,
                               stream_t stream) override {
    pass(driver_call::copy_to_device, bytes);
    return sim_->copy_to_device(device, destination, source, bytes, stream);
  }
  driver_call_counts call_counts() const override { return sim_->call_counts(); }
  double modelled_cost_us(driver_call call, std::size_t bytes) const override {
    return sim_->modelled_cost_us(call, bytes);
  }

 private:
  void pass(driver_call call, std::size_t bytes) { before_call_(call, bytes); }

  std::shared_ptr<sim_driver> sim_;
  hook before_call_;
};

/// Holds the calls of one kind inside the driver until the test lets them go.
class call_holder {
 public:
  /// From now on, calls of kind `call` wait inside the driver until release_held() (the call is
  /// then made on the sim).
  void hold(driver_call call) {
    std::lock_guard lock(mutex_);
    held_ = call;
  }
  /// Lets held calls go, and holds no more.
  void release_held() {
    std::lock_guard lock(mutex_);
    held_.reset();
    changed_.notify_all();
  }
  /// Waits until a thread is inside a held call.
  void wait_until_held() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return holding_ > 0; });
  }
  /// The hook for call_hook_driver.
  void operator()(driver_call call, std::size_t) {
    std::unique_lock lock(mutex_);
    if (held_ != call) return;
    ++holding_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return held_ != call; });
    --holding_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<driver_call> held_;
  int holding_ = 0;
};

/// A driver over `sim` whose calls of a chosen kind can be held.
class held_call_driver final : public call_hook_driver {
 public:
  explicit held_call_driver(std::shared_ptr<sim_driver> sim)
      : call_hook_driver(std::move(sim), [this](driver_call call, std::size_t bytes) { holder_(call, bytes); }) {}
  void hold(driver_call call) { holder_.hold(call); }
  void release_held() { holder_.release_held(); }
  void wait_until_held() { holder_.wait_until_held(); }

 private:
  call_holder holder_;
};

}  // namespace tidepool::testing
