"""Forget conntrack entries by mark, over ctnetlink (what `conntrack -D --mark` does).

Why partitions need it: conntrack follows a connection only while some ruleset needs it. A
connection that carried on while no partition was in force still has the entry it got during
the last one, with sequence numbers long gone stale; when the next partition comes, its packets
fall outside that entry's window, are "invalid", carry no conntrack entry and so no mark, and
pass every rule. Forgetting the entries rsdrill marked makes conntrack pick those connections
up afresh (midstream pickups are tracked liberally), so their marks are set again.
"""

from __future__ import annotations

import errno
import os
import socket
import struct

_NETLINK_NETFILTER = 12
_NFNL_SUBSYS_CTNETLINK = 1
_IPCTNL_MSG_CT_DELETE = 2
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_NLMSG_ERROR = 2
_CTA_MARK, _CTA_MARK_MASK = 8, 21
_TIMEOUT_S = 5.0


class ConntrackError(Exception):
    """The kernel refused to forget the entries."""


def _attribute(kind: int, value: int) -> bytes:
    return struct.pack("=HH", 8, kind) + struct.pack("!I", value)


def forget(mark: int, mask: int) -> None:
    """Delete every conntrack entry (IPv4 and IPv6) whose mark & `mask` == `mark`."""
    # nfgenmsg: family AF_UNSPEC with version 0 means every family.
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, 0)
    body += _attribute(_CTA_MARK, mark) + _attribute(_CTA_MARK_MASK, mask)
    kind = (_NFNL_SUBSYS_CTNETLINK << 8) | _IPCTNL_MSG_CT_DELETE
    header = struct.pack("=IHHII", 16 + len(body), kind, _NLM_F_REQUEST | _NLM_F_ACK, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER) as sock:
            sock.settimeout(_TIMEOUT_S)
            sock.bind((0, 0))
            sock.send(header + body)
            reply = sock.recv(65536)
    except OSError as exc:
        raise ConntrackError(f"ctnetlink: {exc}") from exc
    _length, reply_kind = struct.unpack_from("=IH", reply)
    if reply_kind != _NLMSG_ERROR:
        raise ConntrackError(f"ctnetlink: unexpected reply type {reply_kind}")
    (code,) = struct.unpack_from("=i", reply, 16)
    # ENOENT: nothing matched (older kernels say so on an empty flush).
    if code not in (0, -errno.ENOENT):
        raise ConntrackError(f"ctnetlink: {os.strerror(-code)}")
