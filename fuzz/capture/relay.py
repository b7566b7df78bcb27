# Recording TCP relay: every recv chunk is logged as one JSON line {"d": "c"|"s", "b": hex}.
import json, socket, sys, threading, itertools, selectors
LISTEN, UPSTREAM, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
counter = itertools.count()
def handle(c):
    n = next(counter)
    s = socket.create_connection(("127.0.0.1", UPSTREAM))
    for x in (c, s): x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    log = open(f"{OUT}/conn-{n:03d}.jsonl", "w")
    sel = selectors.DefaultSelector()
    sel.register(c, selectors.EVENT_READ, ("c", s)); sel.register(s, selectors.EVENT_READ, ("s", c))
    open_ = True
    while open_:
        for key, _ in sel.select():
            d, other = key.data
            data = key.fileobj.recv(65536)
            if not data:
                open_ = False; break
            log.write(json.dumps({"d": d, "b": data.hex()}) + "\n"); log.flush()
            other.sendall(data)
    c.close(); s.close(); log.close()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", LISTEN)); l.listen(16)
while True:
    c, _ = l.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
