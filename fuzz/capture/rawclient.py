# Minimal MySQL client for capturing command-phase traffic (binary protocol, DEPRECATE_EOF, pipelining).
import hashlib, socket, struct, sys, time
PORT, DEPRECATE_EOF = int(sys.argv[1]), sys.argv[2] == "1"
s = socket.create_connection(("127.0.0.1", PORT)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def recv_quiet(t=0.3):
    out = b""; s.settimeout(t)
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            return out
        if not d: return out
        out += d
def pkt(seq, payload): return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload
def packets(buf):
    out = []
    while len(buf) >= 4:
        n = int.from_bytes(buf[:3], "little"); out.append((buf[3], buf[4:4+n])); buf = buf[4+n:]
    return out
def native(pw, scramble):
    h1 = hashlib.sha1(pw).digest(); h2 = hashlib.sha1(hashlib.sha1(h1).digest()).digest()
    h2 = hashlib.sha1(scramble + hashlib.sha1(h1).digest()).digest()
    return bytes(a ^ b for a, b in zip(h1, h2))
g = packets(recv_quiet())[0][1]
v_end = g.index(b"\0", 1); fixed = g[v_end+1:]
scramble = fixed[4:12] + fixed[31:31+12]
caps = (1<<2)|(1<<3)|(1<<7)|(1<<9)|(1<<13)|(1<<15)|(1<<16)|(1<<17)|(1<<18)|(1<<19)|(1<<20)|(1<<21)|(1<<23)
if DEPRECATE_EOF: caps |= 1<<24
ext = 1 | 4   # MARIADB_CLIENT_PROGRESS | STMT_BULK_OPERATIONS
auth = native(b"secret", scramble)
attrs = b"".join(bytes([len(k)]) + k + bytes([len(v)]) + v for k, v in [(b"_client_name", b"rawcap"), (b"_pid", b"1")])
resp = struct.pack("<IIB", caps, 1<<24, 45) + b"\0"*19 + struct.pack("<I", ext) + b"app\0" + bytes([len(auth)]) + auth + b"shop\0" + b"mysql_native_password\0" + bytes([len(attrs)]) + attrs
s.sendall(pkt(1, resp)); r = recv_quiet(); assert r[4] == 0, r
def cmd(payload, t=0.3): s.sendall(pkt(0, payload)); return recv_quiet(t)
def stmt_id(r): return struct.unpack("<I", packets(r)[0][1][1:5])[0]
cmd(b"\x03SELECT 1")
cmd(b"\x03SELECT * FROM t")
cmd(b"\x03SELECT 1; SELECT 2, 3; DO 1")
cmd(b"\x03CALL p()")
cmd(b"\x03SELEC 1")
cmd(b"\x03INSERT INTO t3 VALUES (5, 'e')")
r = cmd(b"\x16SELECT id, name, price, created, data FROM t WHERE id > ?"); sid = stmt_id(r)
cmd(b"\x17" + struct.pack("<IBI", sid, 0, 1) + b"\x00\x01" + struct.pack("<BB", 3, 0) + struct.pack("<i", 0))
cmd(b"\x17" + struct.pack("<IBI", sid, 1, 1) + b"\x00\x01" + struct.pack("<BB", 3, 0) + struct.pack("<i", 0))  # cursor
cmd(b"\x1c" + struct.pack("<II", sid, 1))
cmd(b"\x1c" + struct.pack("<II", sid, 5))
cmd(b"\x1a" + struct.pack("<I", sid))  # COM_STMT_RESET
cmd(b"\x19" + struct.pack("<I", sid), 0.1)  # COM_STMT_CLOSE: no answer
r = cmd(b"\x16INSERT INTO t3 VALUES (?, ?)"); sid2 = stmt_id(r)
cmd(b"\x18" + struct.pack("<IH", sid2, 1) + b"long ", 0.1)  # SEND_LONG_DATA: no answer
cmd(b"\x18" + struct.pack("<IH", sid2, 1) + b"data", 0.1)
cmd(b"\x17" + struct.pack("<IBI", sid2, 0, 1) + b"\x00\x01" + struct.pack("<BBBB", 3, 0, 0xfe, 0) + struct.pack("<i", 7))
cmd(b"\x16SELECT 1")
cmd(b"\x16SELECT ?")
cmd(b"\x16SELEC ?")
cmd(b"\x04t\x00")   # COM_FIELD_LIST
cmd(b"\x0e")        # COM_PING
cmd(b"\x02shop")    # COM_INIT_DB
cmd(b"\x02nosuch")
cmd(b"\x09")        # COM_STATISTICS
cmd(b"\x1f")        # COM_RESET_CONNECTION
cmd(b"\x03LOAD DATA LOCAL INFILE 'x.tsv' INTO TABLE t3")  # server asks for the file: answer below
s.sendall(pkt(2, b"10\tp\n11\tq\n") + pkt(3, b"")); recv_quiet()
# pipelined: three commands in one write
s.sendall(pkt(0, b"\x03SELECT 1") + pkt(0, b"\x03SELECT 'x', NULL") + pkt(0, b"\x0e")); recv_quiet()
# COM_CHANGE_USER with a wrong auth answer then auth switch handling
cu = b"\x11app\0" + bytes([0]) + b"shop\0" + struct.pack("<H", 45) + b"mysql_native_password\0" + bytes([len(attrs)]) + attrs
s.sendall(pkt(0, cu)); r = recv_quiet()
for seq, p in packets(r):
    if p[:1] == b"\xfe" and len(p) > 9:
        name_end = p.index(b"\0", 1); sc = p[name_end+1:name_end+1+20]
        s.sendall(pkt(seq + 1, native(b"secret", sc))); recv_quiet()
cmd(b"\x03SELECT CURRENT_USER()")
cmd(b"\x03SELECT REPEAT('b', 20000) UNION ALL SELECT 'c'")
cmd(b"\x03KILL QUERY 1234567")
cmd(b"\x03SET SESSION autocommit=0")
cmd(b"\x03")        # empty query
cmd(b"")            # empty packet
cmd(b"\x7f")        # unknown command
s.sendall(pkt(0, b"\x01")); time.sleep(0.2); s.close()
