"""Test harness: moto's instances stand for the hosts of sandbox members.

A thread polls moto. A member runs while its instance runs with a data volume attached at
/dev/sdf: when the instance stops (or terminates), or its data volume is detached, the member is
SIGKILLed, as a lost host or a vanished disk would take mongod down; when both are back, the
member is restarted — on its kept data directory if the volume is the one it had, on a wiped one
if that volume was replaced by a fresh one (a new, empty disk: full initial sync). So an EC2
experiment run against moto moves a real replica set, and its failover and recovery are
measured, not assumed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harness.moto_ec2 import DATA_DEVICE, Member
from rsdrill.sandbox.cluster import Sandbox

POLL_S = 0.05


@dataclass
class Event:
    at: float  # time.monotonic()
    host: str
    what: str  # killed | restarted-keep | restarted-wipe


@dataclass
class Ec2Binding:
    ec2: Any
    sandbox: Sandbox
    members: dict[str, Member]  # host:port → its instance and data volume
    events: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Ec2Binding:
        self._thread = threading.Thread(target=self._loop, name="ec2-binding", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _loop(self) -> None:
        ids = {m.instance_id: host for host, m in self.members.items()}
        while not self._stop.wait(POLL_S):
            try:
                reservations = self.ec2.describe_instances(InstanceIds=list(ids))["Reservations"]
                for instance in (i for r in reservations for i in r["Instances"]):
                    self._follow(ids[instance["InstanceId"]], instance)
            except Exception as exc:  # recorded for the test to show, never silently lost
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _follow(self, host: str, instance: dict[str, Any]) -> None:
        spec = self.sandbox.spec.member(host)
        running = self.sandbox.pid(spec) is not None
        volume = next((m["Ebs"]["VolumeId"] for m in instance.get("BlockDeviceMappings", [])
                       if m["DeviceName"] == DATA_DEVICE), None)  # fmt: skip
        up = instance["State"]["Name"] == "running" and volume is not None
        if running and not up:
            self.sandbox.kill(spec)
            self.events.append(Event(time.monotonic(), host, "killed"))
        elif up and not running:
            bound = self.members[host]
            wipe = volume != bound.volume_id
            self.sandbox.start(spec, wipe=wipe)
            bound.volume_id = volume  # a fresh volume is the member's disk from now on
            self.events.append(Event(time.monotonic(), host,
                                     "restarted-wipe" if wipe else "restarted-keep"))  # fmt: skip
