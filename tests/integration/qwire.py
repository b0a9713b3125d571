# qwire.py: the kdb+ IPC the integration tests' python clients speak, raw (capability 3,
# little-endian, nothing compressed), so that a test can read what it wants when it wants.
import socket, struct, sys


def cv(x):
    """A char vector."""
    return bytes([10, 0]) + struct.pack("<i", len(x)) + x.encode()


def sym(x):
    """A symbol atom."""
    return bytes([245]) + x.encode() + b"\0"


def route(group, query):
    """(`.qgate.on; `group; "query")"""
    return bytes([0, 0]) + struct.pack("<i", 3) + sym(".qgate.on") + sym(group) + cv(query)


class Q:
    """A connection to port, its handshake sent (user t), its receive buffer rcvbuf if given."""

    def __init__(self, port, rcvbuf=None):
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.connect(("127.0.0.1", port))
        self.s.sendall(b"t:t\3\0")
        self.buf = bytearray()  # read ahead (slurp), taken first

    def send(self, body, t=1):
        """A message of type t (0 async, 1 sync, 2 response)."""
        self.s.sendall(bytes([1, t, 0, 0]) + struct.pack("<i", 8 + len(body)) + body)

    def slurp(self, n, timeout):
        """What comes within timeout seconds, up to n bytes, read ahead: how many."""
        self.s.settimeout(timeout)
        try:
            k = self.s.recv(n)
        except socket.timeout:
            k = b""
        finally:
            self.s.settimeout(None)
        self.buf += k
        return len(k)

    def recvn(self, n):
        b = self.buf[:n]
        del self.buf[:n]
        while len(b) < n:
            k = self.s.recv(min(n - len(b), 1 << 20))
            if not k:
                sys.exit("closed after %d of %d bytes" % (len(b), n))
            b += k
        return bytes(b)

    def header(self):
        """The next message's (type, length), its header checked."""
        h = self.recvn(8)
        n = struct.unpack("<i", h[4:])[0]
        if h[0] != 1 or h[1] > 2 or h[2] != 0 or h[3] != 0 or n < 9:
            sys.exit("a bad header %s" % h.hex())
        return h[1], n

    def frame(self):
        """The next message: (type, body)."""
        t, n = self.header()
        return t, self.recvn(n - 8)

    def rest(self):
        """Everything up to the close."""
        data = self.buf
        self.buf = bytearray()
        while True:
            k = self.s.recv(1 << 20)
            if not k:
                return bytes(data)
            data += k
