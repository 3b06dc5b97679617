"""A member whose disk is throttled keeps answering what it answers from memory (hello,
replSetGetStatus, heartbeats) while its commits wait for the disk, as mongod's threads do; only
the writes that wait for the journal are held up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from pymongo import MongoClient, WriteConcern

from rsdrill.connection import ConnectOptions, DirectConnection
from rsdrill.faultfs.control import request
from rsdrill.platforms.sandbox.volumes import MemberVolumes
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology

pytest_plugins = ["tests.integration.faultfs_fixtures"]


def test_a_member_on_a_throttled_disk_still_answers_from_memory(
    faultfs_tools: None, tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    directory = tmp_path / "set"
    spec = build_topology("rs1", port_base=free_port_base(1))
    volumes = MemberVolumes(directory, spec, track_unsynced=False)
    sandbox = up(directory, spec, EmulatorEngine(), volumes.mount_all)
    host = spec.members[0].host
    try:
        data = volumes.mountpoint(host)
        assert data is not None
        request(data, {"op": "set", "name": "slow", "rule": {"write_iops": 5}})
        took: list[float] = []

        def journaled_writes() -> None:
            with MongoClient(sandbox.uri, serverSelectionTimeoutMS=10_000) as client:
                coll = client.test.get_collection("t", write_concern=WriteConcern(w=1, j=True))
                start = time.monotonic()
                for i in range(1):
                    coll.insert_one({"_id": i, "pad": "x" * 20_000})
                took.append(time.monotonic() - start)

        writer = threading.Thread(target=journaled_writes)
        writer.start()
        conn = DirectConnection(host, 10.0, ConnectOptions())
        answers: list[float] = []
        try:
            while writer.is_alive():
                for cmd in ({"hello": 1}, {"replSetGetStatus": 1}):
                    start = time.monotonic()
                    assert conn.command("admin", cmd)["ok"] == 1.0
                    answers.append(time.monotonic() - start)
                time.sleep(0.02)
        finally:
            conn.close()
            writer.join(60)
        # The throttle held the journaled writes up for seconds...
        assert took and took[0] >= 1.5, took
        # ...and the member answered from memory all along.
        assert len(answers) >= 20 and max(answers) < 0.5, (len(answers), max(answers))
    finally:
        sandbox.down()
        volumes.unmount_all()
