// A driver that forwards every call to a simulated GPU and can hold the calls of one kind until
// the test lets them go: a long driver call (a device-wide wait, trimming the async pools,
// cuMemFree in fallback mode) injected into the sim, so a test can see what other threads can do
// while one thread is inside it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "tidepool/sim.hpp"

namespace tidepool::testing {

class held_call_driver final : public driver {
 public:
  explicit held_call_driver(std::shared_ptr<sim_driver> sim) : sim_(std::move(sim)) {}

  /// From now on, calls of kind `call` wait inside the driver until release_held() (the call is
  /// made on the sim once let go).
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

  std::string name() const override { return sim_->name(); }
  int device_count() override { return sim_->device_count(); }
  bool has_context(int device) override { return sim_->has_context(device); }
  driver_status open_context(int device) override { return sim_->open_context(device); }
  bool supports_virtual_memory(int device) override { return sim_->supports_virtual_memory(device); }
  std::size_t granularity(int device) override { return sim_->granularity(device); }
  driver_status address_reserve(int device, std::size_t size, std::size_t alignment, device_address* out) override {
    pass(driver_call::address_reserve);
    return sim_->address_reserve(device, size, alignment, out);
  }
  driver_status address_free(int device, device_address address, std::size_t size) override {
    pass(driver_call::address_free);
    return sim_->address_free(device, address, size);
  }
  driver_status mem_create(int device, std::size_t size, physical_handle* out) override {
    pass(driver_call::mem_create);
    return sim_->mem_create(device, size, out);
  }
  driver_status mem_release(int device, physical_handle handle) override {
    pass(driver_call::mem_release);
    return sim_->mem_release(device, handle);
  }
  driver_status mem_map(int device, device_address address, std::size_t size, physical_handle handle) override {
    pass(driver_call::mem_map);
    return sim_->mem_map(device, address, size, handle);
  }
  driver_status mem_set_access(int device, device_address address, std::size_t size, int peer) override {
    pass(driver_call::mem_set_access);
    return sim_->mem_set_access(device, address, size, peer);
  }
  driver_status mem_unmap(int device, device_address address, std::size_t size) override {
    pass(driver_call::mem_unmap);
    return sim_->mem_unmap(device, address, size);
  }
  driver_status mem_alloc(int device, std::size_t size, device_address* out) override {
    pass(driver_call::mem_alloc);
    return sim_->mem_alloc(device, size, out);
  }
  driver_status mem_free(int device, device_address address) override {
    pass(driver_call::mem_free);
    return sim_->mem_free(device, address);
  }
  device_memory_info memory_info(int device) override { return sim_->memory_info(device); }
  driver_status stream_create(int device, stream_t* out) override { return sim_->stream_create(device, out); }
  driver_status stream_destroy(int device, stream_t stream) override { return sim_->stream_destroy(device, stream); }
  bool stream_on_device(stream_t stream, int device) override { return sim_->stream_on_device(stream, device); }
  driver_status event_create(int device, event_t* out) override { return sim_->event_create(device, out); }
  driver_status event_destroy(int device, event_t event) override { return sim_->event_destroy(device, event); }
  driver_status event_record(int device, event_t event, stream_t stream) override {
    pass(driver_call::event_record);
    return sim_->event_record(device, event, stream);
  }
  driver_status event_query(int device, event_t event) override { return sim_->event_query(device, event); }
  driver_status event_synchronize(int device, event_t event) override {
    pass(driver_call::event_synchronize);
    return sim_->event_synchronize(device, event);
  }
  driver_status stream_wait_event(int device, stream_t stream, event_t event) override {
    return sim_->stream_wait_event(device, stream, event);
  }
  driver_status stream_synchronize(int device, stream_t stream) override {
    pass(driver_call::stream_synchronize);
    return sim_->stream_synchronize(device, stream);
  }
  driver_status device_synchronize(int device) override {
    pass(driver_call::device_synchronize);
    return sim_->device_synchronize(device);
  }
  std::size_t trim_async_pools(int device) override {
    pass(driver_call::async_pool_trim);
    return sim_->trim_async_pools(device);
  }
  driver_call_counts call_counts() const override { return sim_->call_counts(); }
  double modelled_cost_us(driver_call call, std::size_t bytes) const override {
    return sim_->modelled_cost_us(call, bytes);
  }

 private:
  void pass(driver_call call) {
    std::unique_lock lock(mutex_);
    if (held_ != call) return;
    ++holding_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return held_ != call; });
    --holding_;
  }

  std::shared_ptr<sim_driver> sim_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<driver_call> held_;
  int holding_ = 0;
};

}  // namespace tidepool::testing
