"""A tiny MySQL client (stdlib only) for the load benchmark's connection tests.

The 10,000-connection check and the connection-rate test need thousands of cheap logins from one
process; no stdlib driver exists, and a real driver per connection would cost more than the proxy
being measured. This speaks just enough of the protocol: HandshakeV10 → HandshakeResponse41 with
mysql_native_password (following one AuthSwitchRequest if the server asks), COM_QUERY with a
text result set, COM_QUIT. Both a blocking and an asyncio flavour share the packet code.
"""

import asyncio
import hashlib
import socket
import struct

CLIENT_LONG_PASSWORD = 1  # also "CLIENT_MYSQL": no MariaDB extended capabilities follow
CLIENT_LONG_FLAG = 1 << 2
CLIENT_CONNECT_WITH_DB = 1 << 3
CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_TRANSACTIONS = 1 << 13
CLIENT_SECURE_CONNECTION = 1 << 15
CLIENT_PLUGIN_AUTH = 1 << 19

CAPS = (
    CLIENT_LONG_PASSWORD
    | CLIENT_LONG_FLAG
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_PLUGIN_AUTH
)
NATIVE = b"mysql_native_password"
COM_QUIT = 0x01
COM_QUERY = 0x03


class MySQLError(Exception):
    pass


def scramble(password, nonce):
    """mysql_native_password: SHA1(pw) XOR SHA1(nonce + SHA1(SHA1(pw)))."""
    if not password:
        return b""
    stage1 = hashlib.sha1(password.encode()).digest()
    stage2 = hashlib.sha1(stage1).digest()
    mix = hashlib.sha1(nonce + stage2).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def packet(seq, payload):
    return struct.pack("<I", len(payload))[:3] + bytes([seq & 0xFF]) + payload


def parse_greeting(payload):
    """Returns the 20-byte nonce of a HandshakeV10 (raises on an ERR or anything else)."""
    if payload[:1] == b"\xff":
        raise MySQLError(err_text(payload))
    if payload[:1] != b"\x0a":
        raise MySQLError("not a protocol-10 greeting")
    end = payload.index(b"\x00", 1)
    pos = end + 1 + 4  # connection id
    part1 = payload[pos : pos + 8]
    pos += 8 + 1 + 2 + 1 + 2 + 2  # filler, caps lower, charset, status, caps upper
    auth_len = payload[pos]
    pos += 1 + 10
    part2_len = max(13, auth_len - 8)
    part2 = payload[pos : pos + part2_len].rstrip(b"\x00")
    return part1 + part2[:12]


def handshake_response(user, password, nonce, db=None):
    caps = CAPS | (CLIENT_CONNECT_WITH_DB if db else 0)
    out = struct.pack("<IIB", caps, 1 << 24, 33) + b"\x00" * 23
    out += user.encode() + b"\x00"
    auth = scramble(password, nonce)
    out += bytes([len(auth)]) + auth
    if db:
        out += db.encode() + b"\x00"
    out += NATIVE + b"\x00"
    return out


def err_text(payload):
    code = struct.unpack("<H", payload[1:3])[0] if len(payload) >= 3 else 0
    msg = payload[3:]
    if msg[:1] == b"#":
        msg = msg[6:]
    return "ERR %d: %s" % (code, msg.decode(errors="replace"))


def lenenc(buf, pos):
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFB:
        return None, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def row_values(payload):
    values, pos = [], 0
    while pos < len(payload):
        n, pos = lenenc(payload, pos)
        if n is None:
            values.append(None)
        else:
            values.append(payload[pos : pos + n].decode(errors="replace"))
            pos += n
    return values


def is_eof(payload):
    return payload[:1] == b"\xfe" and len(payload) < 9


class AsyncConn:
    """One connection over asyncio streams (TCP host:port or a unix socket path)."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, addr, user, password, db=None):
        if isinstance(addr, str):
            reader, writer = await asyncio.open_unix_connection(addr)
        else:
            reader, writer = await asyncio.open_connection(addr[0], addr[1])
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = cls(reader, writer)
        try:
            await conn._login(user, password, db)
        except BaseException:
            conn.abort()
            raise
        return conn

    async def _read(self):
        head = await self.reader.readexactly(4)
        n = head[0] | head[1] << 8 | head[2] << 16
        return head[3], await self.reader.readexactly(n)

    async def _login(self, user, password, db):
        seq, greeting = await self._read()
        nonce = parse_greeting(greeting)
        self.writer.write(packet(seq + 1, handshake_response(user, password, nonce, db)))
        seq, reply = await self._read()
        if reply[:1] == b"\xfe":  # AuthSwitchRequest: plugin name NUL, then a fresh nonce
            end = reply.index(b"\x00", 1)
            if reply[1:end] != NATIVE:
                raise MySQLError("server wants auth plugin %r" % reply[1:end])
            self.writer.write(packet(seq + 1, scramble(password, reply[end + 1 : end + 21])))
            seq, reply = await self._read()
        if reply[:1] != b"\x00":
            raise MySQLError(err_text(reply) if reply[:1] == b"\xff" else "unexpected auth reply")

    async def query(self, sql):
        """Runs a statement; returns the rows (lists of strings) of a result set, or []."""
        self.writer.write(packet(0, bytes([COM_QUERY]) + sql.encode()))
        _, first = await self._read()
        if first[:1] == b"\xff":
            raise MySQLError(err_text(first))
        if first[:1] == b"\x00":
            return []
        columns, _ = lenenc(first, 0)
        for _ in range(columns):
            await self._read()
        _, eof = await self._read()
        if not is_eof(eof):
            raise MySQLError("expected EOF after column definitions")
        rows = []
        while True:
            _, p = await self._read()
            if is_eof(p):
                return rows
            if p[:1] == b"\xff":
                raise MySQLError(err_text(p))
            rows.append(row_values(p))

    async def quit(self):
        try:
            self.writer.write(packet(0, bytes([COM_QUIT])))
            await self.writer.drain()
            # The server closes; waiting for that keeps TIME_WAIT on its side, not ours.
            await asyncio.wait_for(self.reader.read(1), 2)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self.abort()

    def abort(self):
        self.writer.close()


class Conn:
    """Blocking flavour for set-up and monitoring queries."""

    def __init__(self, addr, user, password, db=None, timeout=10):
        if isinstance(addr, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(addr)
            self._login(user, password, db)
        except BaseException:
            self.sock.close()
            raise

    def _read_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise MySQLError("connection closed")
            buf += chunk
        return bytes(buf)

    def _read(self):
        head = self._read_exact(4)
        n = head[0] | head[1] << 8 | head[2] << 16
        return head[3], self._read_exact(n)

    def _login(self, user, password, db):
        seq, greeting = self._read()
        nonce = parse_greeting(greeting)
        self.sock.sendall(packet(seq + 1, handshake_response(user, password, nonce, db)))
        seq, reply = self._read()
        if reply[:1] == b"\xfe":
            end = reply.index(b"\x00", 1)
            self.sock.sendall(packet(seq + 1, scramble(password, reply[end + 1 : end + 21])))
            seq, reply = self._read()
        if reply[:1] != b"\x00":
            raise MySQLError(err_text(reply) if reply[:1] == b"\xff" else "unexpected auth reply")

    def query(self, sql):
        self.sock.sendall(packet(0, bytes([COM_QUERY]) + sql.encode()))
        _, first = self._read()
        if first[:1] == b"\xff":
            raise MySQLError(err_text(first))
        if first[:1] == b"\x00":
            return []
        columns, _ = lenenc(first, 0)
        for _ in range(columns):
            self._read()
        self._read()
        rows = []
        while True:
            _, p = self._read()
            if is_eof(p):
                return rows
            if p[:1] == b"\xff":
                raise MySQLError(err_text(p))
            rows.append(row_values(p))

    def close(self):
        try:
            self.sock.sendall(packet(0, bytes([COM_QUIT])))
        except OSError:
            pass
        self.sock.close()


def greets(addr, timeout=2):
    """True when something at addr sends a protocol-10 greeting (readiness probe)."""
    family = socket.AF_UNIX if isinstance(addr, str) else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(addr)
            head = b""
            while len(head) < 5:
                chunk = s.recv(5 - len(head))
                if not chunk:
                    return False
                head += chunk
            return head[4] == 10
    except OSError:
        return False
