"""Seeing memory: tidepool.record() / stop_recording(), describe(device), and memory_snapshot() /
dump_snapshot(path) in the schema of torch.cuda.memory._snapshot(), so that PyTorch's memory_viz
(https://pytorch.org/memory_viz) and torch.cuda._memory_viz draw tidepool's memory.

A snapshot's segments are the runs of mapped memory of each reserved range (as PyTorch shows an
expandable segment: `is_expandable` True), each with its blocks in address order: live blocks are
`active_allocated`, blocks whose free waits for another stream's work `active_pending_free`, cached
blocks `inactive`. Unmapped address space is no segment. Every pool is in it: the device's own (segment_pool_id
(0, 0)) and each tag's (tidepool.region; segment_pool_id (0, tag index + 1), the id of
tidepool.torch.mem_pool(tag) under tidepool.torch.use()). `device_traces` holds, per device, the
latest events of the recording (`record()`, TIDEPOOL_RECORD; at most 100,000 per device) as
PyTorch's trace entries: alloc, free_requested and free_completed (tidepool makes a block
reusable on its stream at the free), oom, segment_map and segment_unmap; empty when nothing was
recorded. Frames are empty: tidepool keeps no stack traces.
"""

import ctypes
import os
import pickle
import time

from . import _arguments, _library, _tags

_STATES = {0: "active_allocated", 1: "inactive", 2: "active_pending_free", 3: "unmapped"}
_ACTIONS = {0: "alloc", 1: "free", 2: "oom", 3: "segment_map", 4: "segment_unmap"}
_SMALL = 1
_PERSISTENT = 2


def record(path):
    """Records every allocation and free of this process's pools (every device) to `path` until
    stop_recording(): an RMM replay log that `tidepool replay` reads (gzip when the path ends in
    .gz; "%p" becomes the process id). It begins with the allocations live now. Streamed: a killed
    process leaves a readable file up to the last flush."""
    path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    _library.check(_library.load().tidepool_start_recording(path.encode()))


def stop_recording():
    """Writes what is buffered and closes the recording; nothing happens when none runs."""
    _library.check(_library.load().tidepool_stop_recording())


def recording_path():
    """The file being recorded to, or None."""
    lib = _library.load()
    length = ctypes.c_size_t(0)
    _library.check(lib.tidepool_recording_path(None, 0, ctypes.byref(length)))
    if length.value == 0:
        return None
    buffer = ctypes.create_string_buffer(length.value + 1)
    _library.check(lib.tidepool_recording_path(buffer, len(buffer), ctypes.byref(length)))
    return buffer.value.decode()


def describe(device=0, tag=None):
    """What `device`'s pool holds now (with `tag`, that tag's pool: all zero where the tag has
    none there): a dict with held_bytes, in_use_bytes, cached_bytes, largest_free_block,
    releasable_bytes (what release() could hand back now), `blocks` (dicts: address, size,
    requested, state - live, free, pending or unmapped -, stream, range, small, persistent) and
    `handles` ((address, size) of each mapped physical handle)."""
    device = _arguments.device("describe", device)
    if tag is not None and not isinstance(tag, str):
        raise TypeError(f"a tag is a str, not {type(tag).__name__}")
    lib = _library.load()
    summary = _library.CMemorySummary()
    summary.struct_size = ctypes.sizeof(summary)
    blocks, handles = [], []

    def on_block(info, _user):
        b = info.contents
        blocks.append({"address": b.address, "size": b.size, "requested": b.requested,
                       "state": ("live", "free", "pending", "unmapped")[b.state], "stream": b.stream,
                       "range": b.range, "small": bool(b.flags & _SMALL),
                       "persistent": bool(b.flags & _PERSISTENT)})

    def on_handle(address, size, _user):
        handles.append((address, size))

    block_fn = _library.BLOCK_FN(on_block)
    handle_fn = _library.HANDLE_FN(on_handle)
    if tag is None:
        _library.check(lib.tidepool_describe(device, ctypes.byref(summary), block_fn, handle_fn, None))
    else:
        _library.check(lib.tidepool_describe_tag(tag.encode(), device, ctypes.byref(summary), block_fn,
                                                 handle_fn, None))
    result = {name: getattr(summary, name) for name, _ in summary._fields_
              if name not in ("struct_size", "blocks", "handles")}
    result["blocks"] = blocks
    result["handles"] = handles
    return result


def recent_events(device=0):
    """The latest events of `device` from the recording (oldest first): dicts with action
    (alloc, free, oom, segment_map, segment_unmap), thread, time_ns (CLOCK_MONOTONIC), address,
    size and stream."""
    device = _arguments.device("recent_events", device)
    events = []

    def on_event(event, _user):
        e = event.contents
        events.append({"action": _ACTIONS.get(e.action, str(e.action)), "thread": e.thread,
                       "time_ns": e.time_ns, "address": e.address, "size": e.size, "stream": e.stream})

    event_fn = _library.EVENT_FN(on_event)
    _library.check(_library.load().tidepool_recent_events(device, event_fn, None))
    return events


def _segments(device, blocks, pool_id=(0, 0)):
    """Runs of contiguous mapped blocks of one range, as PyTorch segments of pool `pool_id`."""
    segments = []
    current = None
    for b in blocks:
        if b["state"] == "unmapped":
            current = None
            continue
        if current is None or current["_range"] != b["range"] or current["_end"] != b["address"]:
            current = {"device": device, "address": b["address"], "total_size": 0, "allocated_size": 0,
                       "active_size": 0, "requested_size": 0, "stream": 0,
                       "segment_type": "small" if b["small"] else "large", "segment_pool_id": pool_id,
                       "is_expandable": True, "frames": [], "blocks": [], "_range": b["range"],
                       "_end": b["address"], "_streams": set()}
            segments.append(current)
        state = _STATES[{"live": 0, "free": 1, "pending": 2}[b["state"]]]
        current["blocks"].append({"address": b["address"], "size": b["size"],
                                  "requested_size": b["requested"] if b["state"] == "live" else 0,
                                  "state": state, "frames": []})
        current["total_size"] += b["size"]
        current["_end"] = b["address"] + b["size"]
        if state == "active_allocated":
            current["allocated_size"] += b["size"]
            current["requested_size"] += b["requested"]
            current["_streams"].add(b["stream"])
        if state != "inactive":
            current["active_size"] += b["size"]
    for s in segments:
        streams = s.pop("_streams")
        # A PyTorch segment belongs to one stream; a tidepool range serves every stream, so a
        # segment names one only when all its live blocks were allocated there.
        s["stream"] = streams.pop() if len(streams) == 1 else 0
        del s["_range"], s["_end"]
    return segments


def _trace(events, epoch_offset_us):
    """Recorded events as PyTorch trace entries (time_us: microseconds since the epoch)."""
    entries = []
    for e in events:
        when = e["time_ns"] // 1000 + epoch_offset_us
        base = {"size": e["size"], "stream": e["stream"], "time_us": when, "frames": []}
        action = e["action"]
        if action == "oom":
            entries.append({"action": "oom", "device_free": 0, **base})
        elif action == "free":
            entries.append({"action": "free_requested", "addr": e["address"], **base})
            entries.append({"action": "free_completed", "addr": e["address"], **base})
        else:
            entries.append({"action": action, "addr": e["address"], **base})
    return entries


def tag_pool_id(tag):
    """The segment_pool_id of tag `tag`'s segments in memory_snapshot(): (0, its index + 1)."""
    return (0, _tags.tag_id(tag) + 1)


def memory_snapshot(pool_id=None):
    """tidepool's memory in the schema of torch.cuda.memory._snapshot(): `segments` (every pool's;
    with `pool_id`, a segment_pool_id such as tag_pool_id(tag), that pool's alone),
    `device_traces` (one list per device) and `allocator_settings`."""
    if pool_id is not None:
        if (not isinstance(pool_id, (tuple, list)) or len(pool_id) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in pool_id)):
            raise TypeError(f"pool_id is a pair of ints such as tidepool.tag_pool_id(tag), not {pool_id!r}")
        pool_id = tuple(pool_id)
    lib = _library.load()
    count = ctypes.c_int(0)
    _library.check(lib.tidepool_device_count(ctypes.byref(count)))
    # CLOCK_MONOTONIC (the recorder's steady clock) to the epoch, as PyTorch's time_us.
    epoch_offset_us = (time.time_ns() - time.monotonic_ns()) // 1000
    segments, traces = [], []
    tags = _tags.tags()
    for device in range(count.value):
        if pool_id in (None, (0, 0)):
            segments.extend(_segments(device, describe(device)["blocks"]))
        for index, tag in enumerate(tags):
            if pool_id in (None, (0, index + 1)):
                segments.extend(_segments(device, describe(device, tag)["blocks"], (0, index + 1)))
        traces.append(_trace(recent_events(device), epoch_offset_us))
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": True,
                                   "allocator": "tidepool"}}


def dump_snapshot(path):
    """Pickles memory_snapshot() to `path`, as torch.cuda.memory._dump_snapshot does: open it at
    https://pytorch.org/memory_viz or with torch.cuda._memory_viz."""
    snapshot = memory_snapshot()
    with open(path, "wb") as f:
        pickle.dump(snapshot, f)
    return snapshot
