"""A small authoritative DNS server for tests: answers from a zone given as JSON, NXDOMAIN for
names it does not hold. Messages are read and built with dnspython, the library pymongo resolves
`mongodb+srv://` names with.

    python -m tests.harness.dns ZONE.json [--port 53]

ZONE.json maps a name ("rs.sandbox.test.") to records: [["SRV", "0 0 28017 m1.sandbox.test."],
["TXT", "\\"replicaSet=rs0\\""], ["A", "127.0.0.1"]]. It serves UDP on 127.0.0.1 until killed.
"""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

Zone = dict[str, list[tuple[str, str]]]


def answer(query: bytes, zone: Zone) -> bytes:
    """The response to one query message."""
    request = dns.message.from_wire(query)
    response = dns.message.make_response(request)
    for question in request.question:
        name = question.name.to_text().lower()
        if name not in zone:
            response.set_rcode(dns.rcode.NXDOMAIN)
            continue
        wanted = dns.rdatatype.to_text(question.rdtype)
        texts = [text for kind, text in zone[name] if kind == wanted]
        if texts:
            response.answer.append(dns.rrset.from_text(question.name, 60, "IN", wanted, *texts))
    return bytes(response.to_wire())


def serve(zone: Zone, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", port))
        while True:
            query, client = sock.recvfrom(4096)
            try:
                sock.sendto(answer(query, zone), client)
            except Exception:  # a malformed query gets no answer; the server keeps serving
                continue


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("zone", type=Path)
    parser.add_argument("--port", type=int, default=53)
    args = parser.parse_args()
    raw = json.loads(args.zone.read_text())
    serve({name.lower(): [tuple(r) for r in records] for name, records in raw.items()}, args.port)


if __name__ == "__main__":
    main()
