"""`engine: ssm`: faults carried out inside the member's instance by a shell script that SSM Run
Command (the `AWS-RunShellScript` document) runs as root, reverted by another; both wait for
the command's outcome.

- iops-throttle: the I/O limits of the member's mongod's cgroup (its service's, read from
  /proc/PID/cgroup) on the disk holding `target.ec2.dbpath`: cgroup v2 `io.max` (lifted with
  `max`), or on cgroup v1 hosts (Amazon Linux 2) `blkio.throttle.*_device` (lifted with 0). An
  exact IOPS or bandwidth cap; both controllers cap reads and writes separately.
- host-freeze: SIGSTOP of the mongod process, SIGCONT on revert: it keeps its PID and sockets.

The instances need the SSM agent and an instance profile that lets it register; the preflight
asks SSM whether each member's instance is managed and online. The revert script is journaled,
so `rsdrill recover` runs it again from the journal alone (both scripts can be run twice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rsdrill.faults import IopsThrottleFault

import shlex
from dataclasses import dataclass
from typing import Any

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.lookup import Instance

DOCUMENT = "AWS-RunShellScript"
# The longest SSM may take to start a command on the instance.
COMMAND_TIMEOUT_S = 60
_RUNNING = ("Pending", "InProgress", "Delayed")


@dataclass(frozen=True)
class Scripts:
    """What runs on the instance: the fault, its check (exit 0: in force) and its revert."""

    inject: str
    check: str
    revert: str


def _find_process(process: str) -> str:
    return (f"pid=$(pgrep -o -x {shlex.quote(process)}) || "
            f"{{ echo 'no {process} process' >&2; exit 3; }}")  # fmt: skip


# io.max keys → the cgroup v1 blkio files that hold the same limit.
_BLKIO_FILES = {"riops": "read_iops_device", "wiops": "write_iops_device",
                "rbps": "read_bps_device", "wbps": "write_bps_device"}  # fmt: skip


def _find_cgroup_device(process: str, dbpath: str) -> str:
    """Shell lines setting $v2 (the process's cgroup v2 directory, if it has io.max), $v1 (its
    cgroup v1 blkio directory) and $dev (MAJ:MIN of the whole disk holding `dbpath`: the
    limits take disks, not partitions)."""
    return "\n".join([
        "set -eu",
        _find_process(process),
        'v2="/sys/fs/cgroup$(awk -F: \'$1 == "0" {print $3}\' /proc/$pid/cgroup)"',
        'v1="/sys/fs/cgroup/blkio$(awk -F: \'$2 ~ /(^|,)blkio(,|$)/ {print $3}\' '
        '/proc/$pid/cgroup)"',
        '[ -e "$v2/io.max" ] || [ -e "$v1/blkio.throttle.read_iops_device" ] || '
        '{ echo "no cgroup I/O controller for $pid" >&2; exit 3; }',
        f"src=$(findmnt -no SOURCE -T {shlex.quote(dbpath)})",
        'disk=$(lsblk -no PKNAME "$src" | head -n1)',
        '[ -n "$disk" ] && src="/dev/$disk"',
        "dev=$(lsblk -dno MAJ:MIN \"$src\" | tr -d ' ')",
    ])  # fmt: skip


def _either(v2: str, v1: list[str]) -> str:
    """`v2` where the cgroup has io.max, else the `v1` lines."""
    return f'if [ -e "$v2/io.max" ]; then\n{v2}\nelse\n' + "\n".join(v1) + "\nfi"


def cgroup_io_scripts(process: str, dbpath: str, limits: dict[str, int]) -> Scripts:
    """I/O `limits` (io.max keys: riops, wiops, rbps, wbps) on the disk of `dbpath` for
    `process`'s cgroup, v2 or v1."""
    find = _find_cgroup_device(process, dbpath)
    wanted = " ".join(f"{key}={value}" for key, value in limits.items())
    lifted = " ".join(f"{key}=max" for key in limits)
    v1 = {key: f'"$v1/blkio.throttle.{_BLKIO_FILES[key]}"' for key in limits}
    # io.max lists the device's limits in one line, blkio one file per limit.
    present_v2 = " && ".join(f'grep -q "^$dev .*{k}={v}" "$v2/io.max"' for k, v in limits.items())
    present_v1 = [f'grep -q "^$dev {v}$" {v1[k]}' for k, v in limits.items()]
    return Scripts(
        inject=find + "\n" + _either(f'echo "$dev {wanted}" > "$v2/io.max"',
                                     [f'echo "$dev {v}" > {v1[k]}' for k, v in limits.items()]),
        check=find + "\n" + _either(present_v2, present_v1),
        revert=find + "\n" + _either(f'echo "$dev {lifted}" > "$v2/io.max"',
                                     [f'echo "$dev 0" > {v1[k]}' for k in limits]),
    )  # fmt: skip


def freeze_scripts(process: str) -> Scripts:
    find = f"set -eu\n{_find_process(process)}"
    return Scripts(
        inject=f'{find}\nkill -STOP "$pid"',
        # `ps` shows T for a stopped process.
        check=f'{find}\nps -o stat= -p "$pid" | grep -q T',
        revert=f'{find}\nkill -CONT "$pid"',
    )


def io_max_limits(fault: IopsThrottleFault) -> dict[str, int]:
    """The fault's separate read/write caps as io.max keys (MiB/s as bytes per second)."""
    mib = 1024 * 1024
    limits = {"riops": fault.read_iops, "wiops": fault.write_iops,
              "rbps": fault.read_mb_s and round(fault.read_mb_s * mib),
              "wbps": fault.write_mb_s and round(fault.write_mb_s * mib)}  # fmt: skip
    return {key: value for key, value in limits.items() if value}


class SsmFault:
    """One fault run on the member's instance by SSM Run Command."""

    def __init__(self, aws: Aws, instance: Instance, kind: str, scripts: Scripts) -> None:
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        self.kind = kind
        self.scripts = scripts

    def describe(self) -> str:
        what = {"iops-throttle": "set mongod's cgroup io.max on the data disk",
                "host-freeze": "SIGSTOP mongod"}.get(self.kind, self.kind)  # fmt: skip
        undo = {"iops-throttle": "lift it (max)", "host-freeze": "SIGCONT it"}.get(self.kind, "")
        return f"SSM Run Command on {self.instance.id} ({self.target}): {what}; later {undo}"

    def revert_action(self) -> dict[str, Any]:
        return {"action": "ec2.ssm-command", **self.aws.conn.to_action(),
                "instance_id": self.instance.id, "what": f"revert {self.kind}",
                "script": self.scripts.revert}  # fmt: skip

    def inject(self) -> None:
        run_script(self.aws, self.instance.id, self.scripts.inject, f"rsdrill {self.kind}")

    def verify(self, timeout_s: float) -> bool:
        def check() -> tuple[bool, str]:
            status, _ = run_command(self.aws, self.instance.id, self.scripts.check,
                                    f"rsdrill check {self.kind}")  # fmt: skip
            return status == "Success", status

        return self.aws.poll(f"{self.kind} in force on {self.instance.id}", check, timeout_s)

    def revert(self) -> None:
        run_ssm_revert(self.aws, self.revert_action())


def run_command(aws: Aws, instance_id: str, script: str, comment: str) -> tuple[str, str]:
    """Run `script` on the instance; its final status and its stderr (or stdout)."""
    command = aws.call("ssm", "send_command", InstanceIds=[instance_id], DocumentName=DOCUMENT,
                       Comment=comment[:100], TimeoutSeconds=COMMAND_TIMEOUT_S,
                       Parameters={"commands": [script]})["Command"]["CommandId"]  # fmt: skip
    outcome: dict[str, Any] = {}

    def finished() -> tuple[bool, str]:
        try:
            invocation = aws.call("ssm", "get_command_invocation", CommandId=command,
                                  InstanceId=instance_id)  # fmt: skip
        except AwsError as exc:
            if exc.code == "InvocationDoesNotExist":  # not registered yet
                return False, "Pending"
            raise
        outcome.update(invocation)
        return invocation["Status"] not in _RUNNING, str(invocation["Status"])

    aws.wait(f"SSM command {command} on {instance_id}", finished)
    said = outcome.get("StandardErrorContent") or outcome.get("StandardOutputContent") or ""
    return str(outcome["Status"]), str(said).strip()


def run_script(aws: Aws, instance_id: str, script: str, comment: str) -> str:
    """Run `script`; InjectionError naming its status and output unless it succeeded."""
    status, said = run_command(aws, instance_id, script, comment)
    if status != "Success":
        raise InjectionError(f"{comment} on {instance_id}: SSM command {status}"
                             f"{f': {said}' if said else ''}")  # fmt: skip
    return said


def run_ssm_revert(aws: Aws, action: dict[str, Any]) -> str:
    """The journaled revert script, run again (it is repeatable)."""
    run_script(aws, action["instance_id"], action["script"], f"rsdrill {action['what']}")
    return f"{action['what']} on {action['instance_id']} (SSM Run Command)"


def unmanaged(aws: Aws, instance: Instance) -> str | None:
    """Why SSM cannot run commands on the instance now, or None."""
    found = aws.call("ssm", "describe_instance_information",
                     Filters=[{"Key": "InstanceIds", "Values": [instance.id]}])  # fmt: skip
    info = found.get("InstanceInformationList", [])
    if not info:
        return (f"{instance.member} ({instance.id}) is not managed by SSM (its agent must run, "
                "its instance profile let it register): engine ssm cannot reach it")  # fmt: skip
    if info[0].get("PingStatus") != "Online":
        return f"{instance.member} ({instance.id}): SSM agent {info[0].get('PingStatus')}"
    return None
