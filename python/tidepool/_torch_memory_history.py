"""PyTorch's memory-debugging calls answered by tidepool after tidepool.torch.use():
torch.cuda.memory._record_memory_history, _snapshot (and so _dump_snapshot, which calls it) and
torch.cuda.memory_snapshot.

PyTorch's pluggable allocator interface refuses them ("CUDAPluggableAllocator does not yet support
recordHistory", "... snapshot"), so the workflow PyTorch documents for finding where memory goes
(record the history, run, dump a snapshot, open it at pytorch.org/memory_viz) stops at its first
call under any pluggable allocator. use() answers them from tidepool: recording the history starts
tidepool's recording (to os.devnull where the program records nothing itself: only its ring of
the latest events per device is wanted), turning it off (enabled=None or False) stops a recording
it started and no other, and a snapshot is tidepool.memory_snapshot() (segments and blocks as
PyTorch's expandable segments, the ring's events as device_traces; frames empty, since tidepool
keeps no stack traces; the ring holds 100,000 events per device whatever max_entries says), every
tag's memory included; memory_snapshot(mempool_id) gives one pool's segments, such as those of
tidepool.torch.mem_pool(tag).id.
"""

import os

from . import _memory, _torch_replace

# Whether the running recording is one _record_memory_history started (and may stop).
_started_by_history = [False]


def answer_memory_history(torch):
    """Installs the replacements in torch.cuda.memory (and torch.cuda, where PyTorch has the name
    there too)."""
    def record_memory_history(enabled="all", *args, **kwargs):
        if enabled is None or enabled is False:
            if _started_by_history[0]:
                _memory.stop_recording()
                _started_by_history[0] = False
            return
        if _memory.recording_path() is None:
            _memory.record(os.devnull)
            _started_by_history[0] = True

    def snapshot(*args, **kwargs):
        return _memory.memory_snapshot()

    def memory_snapshot(mempool_id=None, *args, **kwargs):
        return _memory.memory_snapshot(mempool_id)["segments"]

    for name, replacement in (("_record_memory_history", record_memory_history),
                              ("_snapshot", snapshot), ("memory_snapshot", memory_snapshot)):
        _torch_replace.replace_memory_call(torch, name,
                                           lambda original, replacement=replacement: replacement)
