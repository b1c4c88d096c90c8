"""How the file descriptors of a pickled MemoryShare (_ipc.py) reach the process that unpickles
it.

With the arguments of a child being spawned they go as multiprocessing sends any descriptor there
(the spawning Popen passes them on). Otherwise (a queue, a pipe, a child's later messages) the
sender keeps copies under a key, and the receiver asks the sender's descriptor server for them with
the key: one Unix socket per pair of processes, authenticated once, then kept, and the descriptors
sent over it with SCM_RIGHTS (at most 253 a message). The server's secret is the sending process's
own and travels in the pickled share, so any process on the machine that gets the bytes can receive
(a multiprocessing child, or a process that got them through Ray, ZeroMQ or a file, as RL
frameworks send torch.multiprocessing's reduced tensors), and only such a process: whoever holds a
pickled share may map its memory, as whoever holds a cudaIpc handle may.
multiprocessing.reduction.DupFd does the same through its resource sharer, but with a new
connection and handshake for each descriptor, and a model's weights are hundreds of tensors (what
that cost: docs/RESULTS.md, "Memory shared between processes").

One message, one round trip: while ForkingPickler.dumps pickles a message (what a queue's feeder,
Connection.send and SimpleQueue.put call once a message), every share in it keeps its descriptors
under the message's key, each share at its own place; the receiver fetches them all at the first
share it unpickles and hands each later share its own (install_message_hooks). ForkingPickler.loads
closes whatever a message's shares left (an import that failed half-way).
"""

import contextlib
import functools
import os
import socket
import threading

_PER_MESSAGE = 253  # SCM_MAX_FD on Linux
_TAKEN_ALREADY = "(a shared allocation can be unpickled once for each time it was pickled)"

# The sender's message being pickled on this thread: `key` is None outside ForkingPickler.dumps,
# 0 inside it until a share keeps descriptors, then the message's key; `state`, what the message's
# reductions keep once for all of them (message_state).
_pickling = threading.local()
# The receiver's messages being unpickled on this thread (ForkingPickler.loads): `batches`, the
# batches they fetched, whose untaken descriptors are closed when the message is done; `state`.
_unpickling = threading.local()


def message_state(receiving=False):
    """A dict that lives while the message being pickled on this thread (or, `receiving`,
    unpickled) does, for what its reductions make once for all of them (the event that the
    receiver's stream waits on); None outside a message."""
    return getattr(_unpickling if receiving else _pickling, "state", None)


class _Server:
    """The sender's side: copies of descriptors by key, handed to whoever asks for the key."""

    def __init__(self):
        from multiprocessing.connection import Listener

        self.secret = os.urandom(32)
        self._listener = Listener(family="AF_UNIX", authkey=self.secret)
        self.address = self._listener.address
        self._lock = threading.Lock()
        self._waiting = {}  # key -> copies of the descriptors, this process's to close
        self._next_key = 0
        # Keys whose descriptors went out, counted once this process closed its copies (after
        # the receiver has them: what a count of this process's open descriptors waits for).
        self.batches_served = 0
        threading.Thread(target=self._accept, name="tidepool-ipc-descriptors", daemon=True).start()

    def keep(self, fds):
        """Keeps copies of `fds` for a receiver: returns their key and where they start under it
        (the key of the message pickled on this thread, if any, else a key of their own)."""
        copies = [os.dup(fd) for fd in fds]
        message_key = getattr(_pickling, "key", None)
        with self._lock:
            key = message_key
            if not key:
                self._next_key += 1
                key = self._next_key
            waiting = self._waiting.setdefault(key, [])
            start = len(waiting)
            waiting += copies
        if message_key == 0:
            _pickling.key = key  # the message's first share: the others join it
        return key, start

    def discard(self, key):
        """Closes the copies kept under `key` (a message whose pickling failed, never sent)."""
        with self._lock:
            copies = self._waiting.pop(key, [])
        for fd in copies:
            os.close(fd)

    def _accept(self):
        while True:
            try:
                connection = self._listener.accept()
            except (OSError, EOFError):
                continue  # a client that failed the handshake
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        from multiprocessing import reduction

        with connection, socket.fromfd(connection.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            while True:
                try:
                    key = connection.recv()
                except (EOFError, OSError):
                    return
                with self._lock:
                    copies = self._waiting.pop(key, None)
                if copies is None:
                    connection.send(-1)
                    continue
                try:
                    connection.send(len(copies))
                    for first in range(0, len(copies), _PER_MESSAGE):
                        reduction.sendfds(sock, copies[first:first + _PER_MESSAGE])
                finally:
                    for fd in copies:
                        os.close(fd)
                    with self._lock:
                        self.batches_served += 1


class _Batch:
    """The receiver's side of one key: the descriptors fetched, each given to the share that
    asks for its place once."""

    def __init__(self, fds):
        self.fds = list(fds)
        self.left = len(self.fds)

    def take(self, start, count, key):
        if start + count > len(self.fds) or any(fd is None for fd in self.fds[start:start + count]):
            raise RuntimeError(f"tidepool: the sending process has no descriptors under key {key} at {start} "
                               + _TAKEN_ALREADY)
        taken = self.fds[start:start + count]
        self.fds[start:start + count] = [None] * count
        self.left -= count
        return taken

    def close_untaken(self):
        for fd in self.fds:
            if fd is not None:
                os.close(fd)
        self.fds = [None] * len(self.fds)
        self.left = 0


_lock = threading.Lock()
_server = None
_clients = {}  # (a sender's address, its secret) -> [connection, lock]
_fetched = {}  # (a sender's address, key) -> _Batch with descriptors not yet taken


def _server_here():
    global _server
    with _lock:
        if _server is None:
            _server = _Server()
        return _server


def _client(address, secret):
    from multiprocessing.connection import Client

    with _lock:
        entry = _clients.get((address, secret))
        if entry is None:
            entry = _clients[(address, secret)] = [Client(address, authkey=secret), threading.Lock()]
        return entry


def _forget_in_child():
    """After fork: the parent's server thread and connections are not this process's, and its
    waiting copies would keep the memory they stand for alive here: closed."""
    global _server, _lock
    if _server is not None:
        for copies in _server._waiting.values():
            for fd in copies:
                os.close(fd)
    for batch in _fetched.values():
        batch.close_untaken()
    _lock = threading.Lock()
    _server = None
    _clients.clear()
    _fetched.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


@contextlib.contextmanager
def _one_message_pickled():
    outer = getattr(_pickling, "key", None), getattr(_pickling, "state", None)
    _pickling.key, _pickling.state = 0, {}
    try:
        yield
    except BaseException:
        if _pickling.key and _server is not None:
            _server.discard(_pickling.key)
        raise
    finally:
        _pickling.key, _pickling.state = outer


@contextlib.contextmanager
def _one_message_unpickled():
    outer = getattr(_unpickling, "batches", None), getattr(_unpickling, "state", None)
    _unpickling.batches, _unpickling.state = [], {}
    try:
        yield
    finally:
        batches = _unpickling.batches
        _unpickling.batches, _unpickling.state = outer
        with _lock:
            for entry in batches:
                batch = _fetched.pop(entry, None)
                if batch is not None:
                    batch.close_untaken()


@functools.cache
def install_message_hooks():
    """Wraps ForkingPickler.dumps and loads (once per process) so that a message's shares travel
    under one key and what a message leaves untaken is closed."""
    from multiprocessing.reduction import ForkingPickler

    dumps = ForkingPickler.__dict__["dumps"].__func__
    loads = ForkingPickler.loads

    @functools.wraps(dumps)
    def dumps_one_message(cls, obj, protocol=None):
        with _one_message_pickled():
            return dumps(cls, obj, protocol)

    @functools.wraps(loads)
    def loads_one_message(*args, **kwargs):
        with _one_message_unpickled():
            return loads(*args, **kwargs)

    ForkingPickler.dumps = classmethod(dumps_one_message)
    ForkingPickler.loads = staticmethod(loads_one_message)


class Descriptors:
    """File descriptors that travel pickled, all at once; made while pickling. detach() in the
    receiving process returns them, that process's own (the caller closes them)."""

    def __init__(self, fds):
        from multiprocessing import context

        self.count = len(fds)
        popen = context.get_spawning_popen()
        if popen is not None:
            self._fds = [popen.duplicate_for_child(fd) for fd in fds]
            self._address = self._key = self._secret = None
            self._start = 0
            return
        server = _server_here()
        self._fds = None
        self._address, self._secret = server.address, server.secret
        self._key, self._start = server.keep(fds)

    def detach(self):
        if self._key is None:
            return list(self._fds)
        entry = (self._address, self._key)
        connection, lock = _client(self._address, self._secret)
        with lock:
            batch = _fetched.get(entry)
            if batch is None:
                batch = _Batch(_fetch(connection, self._key))
                with _lock:
                    _fetched[entry] = batch
                batches = getattr(_unpickling, "batches", None)
                if batches is not None:
                    batches.append(entry)
            taken = batch.take(self._start, self.count, self._key)
            if batch.left == 0:
                with _lock:
                    _fetched.pop(entry, None)
        return taken


def _fetch(connection, key):
    """Every descriptor the sender keeps under `key`, over the kept connection (its lock held)."""
    from multiprocessing import reduction

    with socket.fromfd(connection.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        connection.send(key)
        count = connection.recv()
        if count < 0:
            raise RuntimeError(f"tidepool: the sending process has no descriptors under key {key} " + _TAKEN_ALREADY)
        received = []
        while len(received) < count:
            received += reduction.recvfds(sock, min(_PER_MESSAGE, count - len(received)))
        return received
