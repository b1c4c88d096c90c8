"""How the file descriptors of a pickled MemoryShare (_ipc.py) reach the process that unpickles
it.

With the arguments of a child being spawned they go as multiprocessing sends any descriptor there
(the spawning Popen passes them on). Otherwise (a queue, a pipe, a child's later messages) the
sender keeps copies under a key, and the receiver asks the sender's descriptor server for them
with the key: one Unix socket per pair of processes, authenticated once with the processes'
multiprocessing authkey, then kept, and the descriptors sent over it with SCM_RIGHTS (at most 253
a message). multiprocessing.reduction.DupFd does the same through its resource sharer, but with
a new connection and handshake for each descriptor, and a model's weights are hundreds of
tensors (what that cost: docs/RESULTS.md, "Memory shared between processes").
"""

import os
import socket
import threading

_PER_MESSAGE = 253  # SCM_MAX_FD on Linux


class _Server:
    """The sender's side: copies of descriptors by key, handed to whoever asks for the key."""

    def __init__(self):
        from multiprocessing import process
        from multiprocessing.connection import Listener

        self._listener = Listener(family="AF_UNIX", authkey=process.current_process().authkey)
        self.address = self._listener.address
        self._lock = threading.Lock()
        self._waiting = {}  # key -> copies of the descriptors, this process's to close
        self._next_key = 0
        threading.Thread(target=self._accept, name="tidepool-ipc-descriptors", daemon=True).start()

    def keep(self, fds):
        copies = [os.dup(fd) for fd in fds]
        with self._lock:
            self._next_key += 1
            self._waiting[self._next_key] = copies
            return self._next_key

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


_lock = threading.Lock()
_server = None
_clients = {}  # a sender's address -> [connection, lock]


def _server_here():
    global _server
    with _lock:
        if _server is None:
            _server = _Server()
        return _server


def _client(address):
    from multiprocessing import process
    from multiprocessing.connection import Client

    with _lock:
        entry = _clients.get(address)
        if entry is None:
            entry = _clients[address] = [Client(address, authkey=process.current_process().authkey),
                                         threading.Lock()]
        return entry


def _forget_in_child():
    """After fork: the parent's server thread and connections are not this process's, and its
    waiting copies would keep the memory they stand for alive here: closed."""
    global _server, _lock
    if _server is not None:
        for copies in _server._waiting.values():
            for fd in copies:
                os.close(fd)
    _lock = threading.Lock()
    _server = None
    _clients.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class Descriptors:
    """File descriptors that travel pickled, all at once; made while pickling. detach() in the
    receiving process returns them, that process's own (the caller closes them)."""

    def __init__(self, fds):
        from multiprocessing import context

        self.count = len(fds)
        popen = context.get_spawning_popen()
        if popen is not None:
            self._fds = [popen.duplicate_for_child(fd) for fd in fds]
            self._address = self._key = None
            return
        server = _server_here()
        self._fds = None
        self._address = server.address
        self._key = server.keep(fds)

    def detach(self):
        if self._key is None:
            return list(self._fds)
        from multiprocessing import reduction

        connection, lock = _client(self._address)
        with lock, socket.fromfd(connection.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            connection.send(self._key)
            count = connection.recv()
            if count != self.count:
                raise RuntimeError(f"tidepool: the sending process has no descriptors under key {self._key} "
                                   "(a shared allocation can be unpickled once for each time it was pickled)")
            received = []
            while len(received) < count:
                received += reduction.recvfds(sock, min(_PER_MESSAGE, count - len(received)))
        return received
