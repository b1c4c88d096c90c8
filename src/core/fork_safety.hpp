// fork() and the pools: every pool of the process, whoever made it, has its locks held across
// fork(), so a child (a data-loader worker forked while another thread allocates) never inherits
// a pool that a thread it does not have was changing, with a lock held for ever.
#pragma once

namespace tidepool::detail {

class pool_impl;

/// Registers the pthread_atfork handlers that hold every pool's locks across fork(), once per
/// process (later calls do nothing). The process layer calls it first thing, so that handlers
/// registered after it (the recorder's, the tag registry's), whose prepare steps run before its
/// own, take their mutexes before any pool's lock: the order the code under them takes them in.
void install_pool_fork_handlers();

/// A pool made (its constructor's last step): from now on it is locked across fork().
void note_pool_made(pool_impl& made);
/// A pool going (its destructor's first step, before it takes its own lock).
void note_pool_gone(pool_impl& gone) noexcept;

}  // namespace tidepool::detail
