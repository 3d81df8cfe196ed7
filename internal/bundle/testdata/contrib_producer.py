"""Produce as the contrib Python producer does (spec section 10), for a test.

Usage: contrib_producer.py <zk hosts> <zk root> <topic> <count>

Reads the old ZooKeeper layout (<root>/brokers/topics/<topic>/<id>-m with a
plain partition count, the url from <root>/brokers/ids/<id>/master), sends
6-field puts one at a time round robin, every third message with an
attribute (flag 1), checks each answer's opaque, sends a `version`
heartbeat, and prints one JSON object per message.
"""
import json
import socket
import struct
import sys
from urllib.parse import urlparse

from kazoo.client import KazooClient

INT_MIN, INT_MAX = -2147483648, 2147483647


class Counter:
    """A Java int counted up from INT_MIN, taken after the increment."""

    def __init__(self):
        self.value = INT_MIN

    def next(self):
        self.value += 1
        if self.value >= INT_MAX:
            self.value = INT_MIN
        return self.value


def read_answer(f, opaque):
    head = f.readline()
    if not head:
        raise RuntimeError("connection closed")
    kind, status, length, resp_opaque = head.decode().split(" ")
    body = f.read(int(length))
    if kind != "result" or int(resp_opaque) != opaque or len(body) != int(length):
        raise RuntimeError("bad answer %r for opaque %d" % (head, opaque))
    return int(status), body


def main():
    hosts, root, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        topic_dir = "%s/brokers/topics/%s" % (root, topic)
        urls, partitions = {}, []
        for child in zk.get_children(topic_dir):
            if not child.endswith("-m"):
                continue
            broker_id = int(child[: child.index("-m")])
            url, _ = zk.get("%s/brokers/ids/%d/master" % (root, broker_id))
            num, _ = zk.get("%s/%s" % (topic_dir, child))
            urls[broker_id] = url.decode()
            partitions.extend((broker_id, p) for p in range(int(num)))
        partitions.sort()
    finally:
        zk.stop()
        zk.close()
    if not partitions:
        raise RuntimeError("no partitions for %s" % topic)

    conns = {}
    for broker_id, url in urls.items():
        u = urlparse(url)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns[broker_id] = (s, s.makefile("rb"))

    opaques, selector = Counter(), Counter()
    for i in range(count):
        data = ("py-%d" % i).encode()
        attr = ("py-attr-%d" % i).encode() if i % 3 == 1 else None
        flag, payload = 0, data
        if attr is not None:
            flag = 1
            payload = struct.pack(">i", len(attr)) + attr + data
        broker_id, partition = partitions[selector.next() % len(partitions)]
        sock, f = conns[broker_id]
        opaque = opaques.next()
        sock.sendall(("put %s %d %d %d %d\r\n" % (topic, partition, len(payload), flag, opaque)).encode() + payload)
        status, body = read_answer(f, opaque)
        if status != 200:
            raise RuntimeError("put %d: %d %r" % (i, status, body))
        msg_id, part, offset = body.decode().split(" ")
        print(json.dumps({"broker": broker_id, "partition": int(part), "id": int(msg_id), "offset": int(offset),
                          "data": data.decode(), "attr": None if attr is None else attr.decode()}))

    for broker_id, (sock, f) in conns.items():
        opaque = opaques.next()
        sock.sendall(("version %d\r\n" % opaque).encode())
        status, _ = read_answer(f, opaque)
        if status != 200:
            raise RuntimeError("heartbeat: %d" % status)
        sock.close()


if __name__ == "__main__":
    main()
