// tags.hpp: the process layer's tags (issue 13), for the C API and the rest of src/process/.
//
// A tag is a set of pools of its own, one per device, made on first use: its own address ranges,
// so its freed memory is never reused by another tag and a pointer's tag is found by asking the
// tag pools whether they own it. Entries are never freed while the process runs (a framework may
// free into them at exit); lookups are atomic loads.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tidepool/pool.hpp"

namespace tidepool::detail {

/// The most tags a process may name.
inline constexpr std::size_t max_tags = 64;

struct tag_entry {
  tag_entry(std::string name_in, int devices);
  std::string name;
  int device_count;
  std::unique_ptr<std::atomic<pool*>[]> pools;  ///< per device, once made
  std::vector<std::unique_ptr<pool>> owned;       ///< written under the registry's mutex
};

/// The tag named `name`, made if new (throws tidepool::error for a bad name, or past max_tags).
tag_entry& tag_named(const std::string& name);
/// The tag named `name`, or nullptr.
tag_entry* find_tag(const std::string& name) noexcept;
/// The tag with index `id` (0-based, in order of first use), or nullptr.
tag_entry* tag_at(std::size_t id) noexcept;
/// How many tags the process has named (their indexes are 0 to tag_count() - 1).
std::size_t tag_count() noexcept;
/// `tag`'s index.
std::size_t tag_id(const tag_entry& tag) noexcept;
/// `tag`'s pool of `device`, made on first use (the process's default options and driver).
pool& tag_pool_of(tag_entry& tag, int device);
/// Whether any tag has a pool (so a pointer may belong to one). One relaxed load.
bool tags_have_pools() noexcept;
/// The tag pool (of `device`, or of any device when device < 0) that holds `ptr` live, or nullptr.
pool* tag_pool_owning(const void* ptr, int device);
/// Every existing tag pool of `device` (any device when device < 0).
std::vector<pool*> tag_pools(int device);
/// The calling thread's current tag, or nullptr.
tag_entry* current_tag_entry() noexcept;
/// fork(): takes the tag registry's mutex, so a child never inherits it held by a thread that was
/// naming a tag or making a tag's pool (the pools themselves are locked by core's handlers).
void lock_tags_for_fork() noexcept;
/// Drops what lock_tags_for_fork() took (in the parent, and in the child after fork()).
void unlock_tags_after_fork() noexcept;
/// Drops every tag (tests only; see reset_process_for_testing).
void reset_tags_for_testing();

}  // namespace tidepool::detail
