// PyTorch's caching allocator as a replay baseline; the structure follows DeviceCachingAllocator
// function by function (malloc, get_free_block, alloc_block, alloc_found_block, free_block,
// try_merge_blocks, release_cached_blocks, and the expandable-segment paths) so the two can be
// read side by side.
#include "replay/torch_caching_allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_set>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::replay {

namespace {
constexpr std::size_t min_block_size = 512;                      // kMinBlockSize
constexpr std::size_t small_size = std::size_t{1} << 20;         // kSmallSize
constexpr std::size_t small_buffer = std::size_t{2} << 20;       // kSmallBuffer
constexpr std::size_t large_buffer = std::size_t{20} << 20;      // kLargeBuffer
constexpr std::size_t min_large_alloc = std::size_t{10} << 20;   // kMinLargeAlloc
constexpr std::size_t round_large = std::size_t{2} << 20;        // kRoundLarge

std::uintptr_t key(stream_t s) noexcept { return reinterpret_cast<std::uintptr_t>(s); }
}  // namespace

namespace detail {
bool torch_by_size::operator()(const torch_block* a, const torch_block* b) const noexcept {
  if (a->stream != b->stream) return key(a->stream) < key(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}
bool torch_by_address::operator()(const torch_block* a, const torch_block* b) const noexcept {
  if (a->stream != b->stream) return key(a->stream) < key(b->stream);
  return a->address < b->address;
}
}  // namespace detail

torch_caching_allocator::torch_caching_allocator(std::shared_ptr<driver> drv, int device, bool expandable)
    : driver_(std::move(drv)), device_(device), expandable_(expandable) {}

torch_caching_allocator::~torch_caching_allocator() {
  synchronize_and_free_events();
  for (event_t e : spare_events_) (void)driver_->event_destroy(device_, e);
  if (expandable_) return;  // the segments' destructors unmap and free everything
  // Free every cudaMalloc segment: a segment is found through its first block.
  std::unordered_set<device_address> heads;
  auto note = [&heads](const block* b) {
    while (b->prev != nullptr) b = b->prev;
    heads.insert(b->address);
  };
  for (const auto& [address, b] : active_) note(b);
  for (const block* b : small_.blocks) note(b);
  for (const block* b : large_.blocks) note(b);
  for (const device_address head : heads) (void)driver_->mem_free(device_, head);
}

std::size_t torch_caching_allocator::round_size(std::size_t bytes) noexcept {
  if (bytes < min_block_size) return min_block_size;
  return min_block_size * ((bytes + min_block_size - 1) / min_block_size);
}

std::size_t torch_caching_allocator::segment_size(std::size_t rounded) noexcept {
  if (rounded <= small_size) return small_buffer;
  if (rounded < min_large_alloc) return large_buffer;
  return round_large * ((rounded + round_large - 1) / round_large);
}

std::optional<device_address> torch_caching_allocator::allocate(std::size_t bytes, stream_t stream) {
  const std::size_t size = round_size(bytes);
  block_pool& pool = size <= small_size ? small_ : large_;
  process_events();
  block* b = get_free_block(pool, stream, size);
  if (b == nullptr) {
    b = expandable_ ? alloc_expandable(pool, stream, size) : alloc_segment(pool, stream, size);
    if (b == nullptr) {
      // PyTorch's retry: wait for the events of blocks freed on other streams, free all unsplit
      // cached segments (unmap free pages), then try once more (release_cached_blocks).
      // Before it unmaps, PyTorch waits for the work queued on the segment's stream (cudaFree, in
      // the default allocator, waits for the whole device by itself). The model keeps no stream per
      // segment, so it waits for the device: on sim with the GPU behind (replay --gpu-lag-ms) the
      // wait is on sim's clock as tidepool's are.
      if (expandable_) (void)driver_->device_synchronize(device_);
      release();
      b = expandable_ ? alloc_expandable(pool, stream, size) : alloc_segment(pool, stream, size);
      if (b == nullptr) return std::nullopt;
    }
  }
  b = split_and_take(b, size);
  b->allocated = true;
  active_.emplace(b->address, b);
  return b->address;
}

// get_free_block(): the smallest free block of the same stream that fits, lowest address first.
torch_caching_allocator::block* torch_caching_allocator::get_free_block(block_pool& pool, stream_t stream,
                                                                        std::size_t size) {
  block search{};
  search.stream = stream;
  search.size = size;
  auto it = pool.blocks.lower_bound(&search);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  if ((*it)->segment != nullptr) {
    // A block at the end of an expandable segment counts, for best fit, as the size it can grow
    // to; prefer a following candidate that would grow less.
    auto expandable_size = [](const block* b) {
      return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
    };
    auto next = std::next(it);
    while ((*it)->segment != nullptr && next != pool.blocks.end() && (*next)->stream == stream &&
           expandable_size(*next) < expandable_size(*it)) {
      it = next++;
    }
  }
  block* found = *it;
  pool.blocks.erase(it);
  return found;
}

// alloc_block() without expandable segments: one cudaMalloc of the segment size.
torch_caching_allocator::block* torch_caching_allocator::alloc_segment(block_pool& pool, stream_t stream,
                                                                       std::size_t size) {
  const std::size_t bytes = segment_size(size);
  device_address address = 0;
  const driver_status status = driver_->mem_alloc(device_, bytes, &address);
  if (status == driver_status::out_of_memory) return nullptr;
  if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_alloc, status);
  reserved_ += bytes;
  block* b = nodes_.make();
  b->stream = stream;
  b->size = bytes;
  b->address = address;
  b->pool = &pool;
  return b;
}

// find_expandable_block(): the lowest address in a segment of this pool and stream where free
// and unmapped ranges together hold `size`; a new segment when none does.
torch_caching_allocator::block* torch_caching_allocator::find_expandable_block(block_pool& pool, stream_t stream,
                                                                               std::size_t size) {
  auto allocatable = [](const block* b) { return b != nullptr && !b->allocated; };
  auto has_room = [&](const block* b) {
    std::size_t bytes = 0;
    while (bytes < size && allocatable(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  block search{};
  search.stream = stream;
  for (auto it = pool.unmapped.lower_bound(&search); it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
    block* c = *it;
    if (allocatable(c->prev)) c = c->prev;  // a free block just before the unmapped range
    if (has_room(c)) return c;
  }
  auto segment = std::make_unique<detail::expandable_segment>(driver_, device_, stream,
                                                              pool.is_small ? small_buffer : large_buffer);
  block* candidate = nodes_.make();
  candidate->stream = stream;
  candidate->size = segment->size();
  candidate->address = segment->base();
  candidate->pool = &pool;
  candidate->mapped = false;
  candidate->segment = segment.get();
  segments_.push_back(std::move(segment));
  pool.unmapped.insert(candidate);
  return candidate;
}

// map_block(): backs the first `size` bytes of an unmapped block with pages.
bool torch_caching_allocator::map_block(block* to_map, std::size_t size) {
  const detail::segment_range mapped = to_map->segment->map({to_map->address, size});
  if (mapped.size == 0) return false;
  block_pool& pool = *to_map->pool;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (mapped.size < to_map->size) {
    block* remaining =
        make_neighbour_after(to_map, to_map->address + mapped.size, to_map->size - mapped.size);
    remaining->mapped = false;
    pool.unmapped.insert(remaining);
    to_map->size = mapped.size;
  }
  try_merge(to_map, to_map->prev);
  try_merge(to_map, to_map->next);
  pool.blocks.insert(to_map);
  reserved_ += mapped.size;
  return true;
}

// try_allocate_expandable_block(): grows a segment until a free block of `size` exists.
torch_caching_allocator::block* torch_caching_allocator::alloc_expandable(block_pool& pool, stream_t stream,
                                                                          std::size_t size) {
  block* candidate = find_expandable_block(pool, stream, size);
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) return nullptr;
  while (candidate->size < size) {
    const std::size_t remaining = size - candidate->size;
    block* next = candidate->next;
    if (!map_block(next, std::min(remaining, next->size))) return nullptr;
    candidate = next;  // map_block merged the previous free block into it
  }
  pool.blocks.erase(candidate);
  return candidate;
}

bool torch_caching_allocator::should_split(const block* b, std::size_t size) const noexcept {
  const std::size_t remaining = b->size - size;
  if (b->pool->is_small || expandable_) return remaining >= min_block_size;
  return remaining > small_size;
}

// alloc_found_block(): splits off the remainder when should_split() says so.
torch_caching_allocator::block* torch_caching_allocator::split_and_take(block* b, std::size_t size) {
  if (!should_split(b, size)) return b;
  block* remaining = b;
  block* taken = make_neighbour_before(remaining, remaining->address, size);
  remaining->address += size;
  remaining->size -= size;
  remaining->pool->blocks.insert(remaining);
  return taken;
}

torch_caching_allocator::block* torch_caching_allocator::make_neighbour_before(block* b, device_address address,
                                                                               std::size_t size) {
  block* n = nodes_.make();
  n->stream = b->stream;
  n->pool = b->pool;
  n->segment = b->segment;
  n->address = address;
  n->size = size;
  n->prev = b->prev;
  if (n->prev != nullptr) n->prev->next = n;
  n->next = b;
  b->prev = n;
  return n;
}

torch_caching_allocator::block* torch_caching_allocator::make_neighbour_after(block* b, device_address address,
                                                                              std::size_t size) {
  block* n = nodes_.make();
  n->stream = b->stream;
  n->pool = b->pool;
  n->segment = b->segment;
  n->address = address;
  n->size = size;
  n->next = b->next;
  if (n->next != nullptr) n->next->prev = n;
  n->prev = b;
  b->next = n;
  return n;
}

void torch_caching_allocator::deallocate(device_address address, std::size_t, stream_t stream) {
  const auto it = active_.find(address);
  if (it == active_.end()) {
    throw error(error_code::invalid_pointer, fmt::format("{}: free of {:#x}, not allocated here", name(), address));
  }
  block* b = it->second;
  active_.erase(it);
  if (stream != b->stream) {
    insert_events(b, stream);  // stays allocated, so no neighbour merges with it meanwhile
    return;
  }
  b->allocated = false;
  free_block(b);
}

// insert_events(): an event recorded on the stream the block was used on; the block is freed once
// it completes. A driver that cannot record one leaves the free final, as before the model kept
// events (the replay then reuses the block at once).
void torch_caching_allocator::insert_events(block* b, stream_t stream) {
  const event_t e = take_event();
  if (e == nullptr || driver_->event_record(device_, e, stream) != driver_status::success) {
    if (e != nullptr) spare_events_.push_back(e);
    b->allocated = false;
    free_block(b);
    return;
  }
  pending_[key(stream)].push_back({e, b});
}

event_t torch_caching_allocator::take_event() {
  if (!spare_events_.empty()) {
    const event_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  event_t e = nullptr;
  return driver_->event_create(device_, &e) == driver_status::success ? e : nullptr;
}

// process_events(): each stream's blocks whose events completed, in the order freed, up to the
// first still waiting.
void torch_caching_allocator::process_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::deque<pending_free>& waiting = it->second;
    while (!waiting.empty() && driver_->event_query(device_, waiting.front().event) != driver_status::not_ready) {
      complete(waiting.front());
      waiting.pop_front();
    }
    it = waiting.empty() ? pending_.erase(it) : std::next(it);
  }
}

void torch_caching_allocator::synchronize_and_free_events() {
  for (auto& [stream, waiting] : pending_) {
    for (const pending_free& p : waiting) {
      (void)driver_->event_synchronize(device_, p.event);
      complete(p);
    }
  }
  pending_.clear();
}

void torch_caching_allocator::complete(const pending_free& p) {
  spare_events_.push_back(p.event);
  p.freed->allocated = false;
  free_block(p.freed);
}

// free_block(): merges with free neighbours and returns the block to its pool.
void torch_caching_allocator::free_block(block* b) {
  try_merge(b, b->prev);
  try_merge(b, b->next);
  b->pool->blocks.insert(b);
}

// try_merge_blocks(): absorbs `src` into `dst` when it is free and mapped alike.
std::size_t torch_caching_allocator::try_merge(block* dst, block* src) {
  if (src == nullptr || src->allocated || dst->mapped != src->mapped) return 0;
  if (dst->prev == src) {
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev != nullptr) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  const std::size_t subsumed = src->size;
  dst->size += subsumed;
  if (src->mapped) {
    src->pool->blocks.erase(src);
  } else {
    src->pool->unmapped.erase(src);
  }
  nodes_.recycle(src);
  return subsumed;
}

std::size_t torch_caching_allocator::release() {
  synchronize_and_free_events();
  const std::size_t before = reserved_;
  release_pool(large_);
  release_pool(small_);
  return before - reserved_;
}

// release_blocks(): frees unsplit cudaMalloc segments; in expandable segments unmaps the whole
// free pages of every free block, and frees a segment left with nothing mapped.
void torch_caching_allocator::release_pool(block_pool& pool) {
  std::vector<block*> to_unmap;
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    block* b = *it++;
    if (b->segment != nullptr) {
      to_unmap.push_back(b);
    } else if (!b->is_split()) {
      release_segment(b);
    }
  }
  for (block* b : to_unmap) {
    unmap_block(b);
    if (!b->is_split() && !b->mapped) release_expandable_segment(b);
  }
}

void torch_caching_allocator::release_segment(block* b) {
  const driver_status status = driver_->mem_free(device_, b->address);
  if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_free, status);
  reserved_ -= b->size;
  b->pool->blocks.erase(b);
  nodes_.recycle(b);
}

// unmap_block(): unmaps the whole pages inside a free block, leaving free mapped slivers on
// either side and merging the unmapped part with unmapped neighbours.
void torch_caching_allocator::unmap_block(block* b) {
  const detail::segment_range unmapped = b->segment->unmap({b->address, b->size});
  if (unmapped.size == 0) return;
  block_pool& pool = *b->pool;
  pool.blocks.erase(b);
  const std::size_t before_size = unmapped.begin - b->address;
  if (before_size > 0) pool.blocks.insert(make_neighbour_before(b, b->address, before_size));
  const std::size_t after_size = b->size - (before_size + unmapped.size);
  if (after_size > 0) pool.blocks.insert(make_neighbour_after(b, unmapped.begin + unmapped.size, after_size));
  b->address = unmapped.begin;
  b->size = unmapped.size;
  b->mapped = false;
  try_merge(b, b->prev);
  try_merge(b, b->next);
  pool.unmapped.insert(b);
  reserved_ -= unmapped.size;
}

void torch_caching_allocator::release_expandable_segment(block* b) {
  b->pool->unmapped.erase(b);
  const auto it = std::find_if(segments_.begin(), segments_.end(),
                               [b](const auto& s) { return s.get() == b->segment; });
  if (it != segments_.end()) segments_.erase(it);
  nodes_.recycle(b);
}

}  // namespace tidepool::replay
