#!/usr/bin/env python3
"""Turns captured sessions (relay.py's JSON lines) into seed files for the four fuzz targets.

    python3 seeds.py CAPTURE_DIR CORPUS_DIR

Each capture NAME.jsonl gives: greeting/NAME (the greeting payload), handshake_response/NAME
(the client's first payload), codec/NAME-{server,client}-N (byte 0 = split control, then a window
of the stream cut at packet boundaries) and tracker/NAME-N (the command phase in the tracker
target's format, windows starting at a command). A few documented-format packets that a MariaDB
capture cannot give (MySQL 8 greeting, ERR instead of a greeting, SSLRequest) are written too.
"""
import json
import os
import struct
import sys

WINDOW = 12 * 1024
CLIENT_MYSQL = 1
CLIENT_SSL = 1 << 11
CLIENT_DEPRECATE_EOF = 1 << 24
MARIADB_CLIENT_PROGRESS = 1


def load(path):
    with open(path) as f:
        return [(e["d"], bytes.fromhex(e["b"])) for e in map(json.loads, f)]


def packets(stream):
    """(offset, seq, payload) of each whole packet."""
    out, pos = [], 0
    while pos + 4 <= len(stream):
        n = int.from_bytes(stream[pos:pos + 3], "little")
        if pos + 4 + n > len(stream):
            break
        out.append((pos, stream[pos + 3], stream[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return out


def windows(stream):
    """Pieces of at most WINDOW bytes, cut at packet boundaries (a longer packet is cut short)."""
    cuts = [off for off, _, _ in packets(stream)] + [len(stream)]
    out, start = [], 0
    for a, b in zip(cuts, cuts[1:]):
        if b - start > WINDOW and a > start:
            out.append(stream[start:a])
            start = a
    out.append(stream[start:start + WINDOW])
    return [w for w in out if w]


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def caps_of_greeting(g):
    fixed = g.index(b"\0", 1) + 1
    caps = struct.unpack_from("<H", g, fixed + 13)[0] | struct.unpack_from("<H", g, fixed + 18)[0] << 16
    ext = struct.unpack_from("<I", g, fixed + 27)[0] if not caps & CLIENT_MYSQL else 0
    return caps, ext


def caps_of_response(r):
    caps = struct.unpack_from("<I", r, 0)[0]
    ext = struct.unpack_from("<I", r, 28)[0] if not caps & CLIENT_MYSQL else 0
    return caps, ext


def tracker_input(config, chunks):
    out = bytearray([config])
    for d, b in chunks:
        tag = 1 if d == "s" else 2
        for i in range(0, len(b), 0xFFFF):
            piece = b[i:i + 0xFFFF]
            out += bytes([tag]) + struct.pack("<H", len(piece)) + piece
    return bytes(out)


def command_phase(chunks):
    """Chunks after the server's OK that ends authentication."""
    seen_response = False
    for i, (d, b) in enumerate(chunks):
        if d == "c":
            seen_response = True
        elif seen_response:
            whole = packets(b)
            if whole and whole[-1][2][:1] in (b"\x00", b"\xff"):
                return chunks[i + 1:]
    return []


def main(cap_dir, out):
    for name in sorted(os.listdir(cap_dir)):
        if not name.endswith(".jsonl"):
            continue
        base = name[:-len(".jsonl")]
        chunks = load(os.path.join(cap_dir, name))
        server = b"".join(b for d, b in chunks if d == "s")
        client = b"".join(b for d, b in chunks if d == "c")
        greeting = packets(server)[0][2]
        response = packets(client)[0][2]
        write(f"{out}/greeting/{base}", greeting)
        write(f"{out}/handshake_response/{base}", response)
        for direction, stream, control in (("server", server, 0x3D), ("client", client, 0x0F)):
            for i, w in enumerate(windows(stream)):
                write(f"{out}/codec/{base}-{direction}-{i}", bytes([control]) + w)

        g_caps, g_ext = caps_of_greeting(greeting)
        r_caps, r_ext = caps_of_response(response)
        both_mariadb = not (g_caps | r_caps) & CLIENT_MYSQL
        config = (1 if g_caps & r_caps & CLIENT_DEPRECATE_EOF else 0) | (
            2 if both_mariadb and g_ext & r_ext & MARIADB_CLIENT_PROGRESS else 0)
        phase = command_phase(chunks)
        window, size, n = [], 0, 0
        for d, b in phase:
            starts_command = d == "c" and len(b) > 3 and b[3] == 0
            if starts_command and size > WINDOW // 2:
                write(f"{out}/tracker/{base}-{n}", tracker_input(config, window))
                window, size, n = [], 0, n + 1
            window.append((d, b))
            size += len(b)
        if window:
            write(f"{out}/tracker/{base}-{n}", tracker_input(config, window))

    # Documented formats no MariaDB capture gives.
    scramble = b"abcdefghijklmnopqrst"
    mysql8 = (b"\x0a8.0.36\0" + struct.pack("<I", 0x01020304) + scramble[:8] + b"\0"
              + struct.pack("<H", 0xFFFF) + b"\xff" + struct.pack("<H", 2) + struct.pack("<H", 0xDFFF)
              + bytes([21]) + b"\0" * 10 + scramble[8:] + b"\0" + b"caching_sha2_password\0")
    write(f"{out}/greeting/synthetic-mysql8", mysql8)
    write(f"{out}/greeting/synthetic-err-1040",
          b"\xff" + struct.pack("<H", 1040) + b"Too many connections")
    cli = open(f"{out}/handshake_response/cli-select-1", "rb").read()
    ssl = struct.pack("<I", caps_of_response(cli)[0] | CLIENT_SSL) + cli[4:32]
    write(f"{out}/handshake_response/synthetic-ssl-request", ssl)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
