// The process's recorder: a writer thread that takes every pool's buffer and writes RMM log rows.
#include "process/recorder.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::detail {

namespace {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string expand_pid(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += std::to_string(::getpid());
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

const char* action_text(recorded_event::kind what) {
  switch (what) {
    case recorded_event::kind::allocate:
      return "allocate";
    case recorded_event::kind::free:
      return "free";
    default:
      return "allocate failure";
  }
}

}  // namespace

recorder& recorder::instance() {
  static auto* const r = new recorder();  // leaked on purpose, as the process state
  return *r;
}

void recorder::start(const std::string& path, const recording_options& options, const std::vector<pool*>& pools) {
  if (options.notify_events == 0 || options.synchronous_events < options.notify_events ||
      options.flush_interval.count() <= 0) {
    throw error(error_code::invalid_argument,
                "tidepool: recording options need notify_events > 0, synchronous_events >= notify_events and a "
                "positive flush_interval");
  }
  std::lock_guard file_lock(file_mutex_);
  if (file_) {
    throw error(error_code::invalid_argument, fmt::format("tidepool: recording to {} already", file_->path()));
  }
  auto file = std::make_unique<record_file>(expand_pid(path));
  file->write("Thread,Time,Action,Pointer,Size,Stream\n");
  file_ = std::move(file);
  options_ = options;
  start_ns_ = steady_now_ns();
  history_.clear();
  failed_ = false;
  for (pool* p : pools) {
    if (p != nullptr) attach(*p);
  }
  {
    std::lock_guard wake_lock(wake_mutex_);
    stopping_ = false;
    wake_due_ = false;
  }
  writer_ = std::make_unique<std::thread>([this] { writer_loop(); });
  writer_running_.store(true, std::memory_order_release);
  if (!at_exit_registered_) {
    at_exit_registered_ = true;
    (void)::pthread_atfork(&recorder::fork_prepare, &recorder::fork_parent, &recorder::fork_child);
    // A program that exits normally gets its last rows written.
    std::atexit([] {
      try {
        tidepool::stop_recording();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tidepool: finishing the recording at exit: %s\n", e.what());
      }
    });
  }
}

void recorder::attach(pool& p) {
  p.start_recording(options_.notify_events, &recorder::on_full, this);
}

void recorder::stop(const std::vector<pool*>& pools) {
  writer_running_.store(false, std::memory_order_release);
  {
    std::lock_guard wake_lock(wake_mutex_);
    stopping_ = true;
  }
  // Only a process with a writer of its own wakes it: a forked child's copy of the condition
  // variable still counts the parent's writer as waiting, and must not be touched (fork_child).
  if (writer_) {
    wake_.notify_all();
    writer_->join();
    writer_.reset();
  }
  std::lock_guard file_lock(file_mutex_);
  if (!file_) return;
  for (pool* p : pools) {
    if (p == nullptr) continue;
    taken_.clear();
    p->stop_recording(taken_);
    consume(p->device(), taken_);
  }
  write_text();
  file_.reset();
}

bool recorder::active() const {
  std::lock_guard file_lock(file_mutex_);
  return file_ != nullptr;
}

std::string recorder::path() const {
  std::lock_guard file_lock(file_mutex_);
  return file_ ? file_->path() : std::string{};
}

std::vector<recorded_event> recorder::recent(int device) {
  std::lock_guard file_lock(file_mutex_);
  if (file_) flush_locked();
  if (device < 0 || static_cast<std::size_t>(device) >= history_.size()) return {};
  const auto& ring = history_[static_cast<std::size_t>(device)];
  return {ring.begin(), ring.end()};
}

void recorder::fork_prepare() {
  recorder& self = instance();
  self.file_mutex_.lock();
  self.wake_mutex_.lock();
}

void recorder::fork_parent() {
  recorder& self = instance();
  self.wake_mutex_.unlock();
  self.file_mutex_.unlock();
}

void recorder::fork_child() {
  recorder& self = instance();
  self.wake_mutex_.unlock();
  self.file_mutex_.unlock();
  self.writer_running_.store(false, std::memory_order_relaxed);
  (void)self.writer_.release();  // that thread is the parent's: never joined here
  self.file_.reset();            // closes the child's copy of the descriptor, writes nothing
}

void recorder::on_full(void* context, int /*device*/, std::size_t pending) {
  auto& self = *static_cast<recorder*>(context);
  if (pending >= self.options_.synchronous_events || !self.writer_running_.load(std::memory_order_acquire)) {
    // The writer fell behind, or there is none (stopping, or a forked child, whose condition
    // variable must not be touched): this thread takes the buffers, so they never grow past the
    // bound.
    std::lock_guard file_lock(self.file_mutex_);
    self.flush_locked();
    return;
  }
  {
    std::lock_guard wake_lock(self.wake_mutex_);
    self.wake_due_ = true;
  }
  self.wake_.notify_one();
}

void recorder::writer_loop() {
  std::unique_lock wake_lock(wake_mutex_);
  while (!stopping_) {
    wake_.wait_for(wake_lock, options_.flush_interval, [this] { return wake_due_ || stopping_; });
    if (stopping_) break;
    wake_due_ = false;
    wake_lock.unlock();
    {
      std::lock_guard file_lock(file_mutex_);
      if (file_) flush_locked();
    }
    wake_lock.lock();
  }
}

void recorder::flush_locked() {
  for (pool* p : existing_pools()) {
    if (p == nullptr) continue;
    taken_.clear();
    p->take_recorded(taken_);
    consume(p->device(), taken_);
  }
  write_text();
}

void recorder::consume(int device, const std::vector<recorded_event>& events) {
  const auto d = static_cast<std::size_t>(device);
  if (history_.size() <= d) history_.resize(d + 1);
  auto& ring = history_[d];
  for (const recorded_event& e : events) {
    if (e.what != recorded_event::kind::map && e.what != recorded_event::kind::unmap) append_row(e);
    if (options_.history_events == 0) continue;
    if (ring.size() == options_.history_events) ring.pop_front();
    ring.push_back(e);
  }
}

namespace {

// Row formatting by hand: the writer formats every event, and when a program allocates faster
// than it writes, the allocating thread does (the bound); fmt took 3-4 times as long per row.
char* put_decimal(char* p, std::uint64_t v, int min_digits = 1) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n < min_digits) digits[n++] = '0';
  while (n > 0) *p++ = digits[--n];
  return p;
}

char* put_hex(char* p, std::uint64_t v) {  // as fmt's {:#x}: 0x0, 0x7f3a...
  *p++ = '0';
  *p++ = 'x';
  int shift = v == 0 ? 0 : (63 - __builtin_clzll(v)) & ~3;
  for (; shift >= 0; shift -= 4) *p++ = "0123456789abcdef"[(v >> shift) & 0xF];
  return p;
}

char* put_text(char* p, const char* text) {
  while (*text != '\0') *p++ = *text++;
  return p;
}

}  // namespace

void recorder::append_row(const recorded_event& e) {
  // Thread,HH:MM:SS.ffffff,action,0xpointer,size,0xstream (Time since the recording began)
  const auto us = static_cast<std::uint64_t>(std::max<std::int64_t>(0, (e.time_ns - start_ns_) / 1000));
  const std::uint64_t seconds = us / 1'000'000;
  char row[160];
  char* p = put_decimal(row, e.thread);
  *p++ = ',';
  p = put_decimal(p, seconds / 3600, 2);
  *p++ = ':';
  p = put_decimal(p, (seconds / 60) % 60, 2);
  *p++ = ':';
  p = put_decimal(p, seconds % 60, 2);
  *p++ = '.';
  p = put_decimal(p, us % 1'000'000, 6);
  *p++ = ',';
  p = put_text(p, action_text(e.what));
  *p++ = ',';
  p = put_hex(p, e.address);
  *p++ = ',';
  p = put_decimal(p, e.size);
  *p++ = ',';
  p = put_hex(p, e.stream);
  *p++ = '\n';
  text_.append(row, static_cast<std::size_t>(p - row));
}

void recorder::write_text() {
  if (file_ && !failed_ && !text_.empty()) {
    try {
      file_->write(text_);
    } catch (const std::exception& e) {
      // A full disk must not break the program: say so once and keep emptying the buffers.
      failed_ = true;
      std::fprintf(stderr, "%s; the recording stops here\n", e.what());
    }
  }
  text_.clear();
}

}  // namespace tidepool::detail
