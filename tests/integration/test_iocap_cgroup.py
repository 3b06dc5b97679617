"""The node agent's I/O cap on a real cgroup of this machine: a pod-and-container cgroup tree
made as kubelet's cgroupfs driver lays it out, in this machine's blkio hierarchy (cgroup v1;
the v2 `io.max` text is checked on a file tree in addition). Direct writes from a process in
the container's cgroup are measured capped, then uncapped after the clear, and the limits from
before the cap come back exactly."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsdrill.platforms.kubernetes import iocap
from tests.harness.cgroups import PodCgroup, write_seconds
from tests.harness.cgroups import pod_cgroup as made_pod_cgroup

WRITES = 40


@pytest.fixture
def pod_cgroup() -> Iterator[PodCgroup]:
    with made_pod_cgroup() as made:
        yield made


def _write_seconds(cgroup: Path, tmp: Path) -> float:
    return write_seconds(cgroup, tmp, WRITES)


def test_a_cap_throttles_the_containers_writes_and_clear_restores_the_limits(
    pod_cgroup: PodCgroup, disk_tmp_path: Path
) -> None:
    found = iocap.find_cgroup(pod_cgroup.root, pod_cgroup.pod_uid, pod_cgroup.container_id)
    assert found == pod_cgroup.container
    device = iocap.volume_device(found, str(disk_tmp_path))
    assert device == "{}:{}".format(*divmod(os.stat(disk_tmp_path).st_dev, 256)) or (
        Path(f"/sys/dev/block/{device}").exists()
    )
    # A limit in force before the fault (a read cap someone set) must come back as it was.
    (found / "blkio.throttle.read_iops_device").write_text(f"{device} 5000\n")
    state = disk_tmp_path / "state"
    free = _write_seconds(found, disk_tmp_path)

    answer = iocap.apply(found, device, iocap.Limits(wiops=20), state)
    assert answer["cgroup_version"] == 1
    assert answer["limits"] == {"rbps": None, "wbps": None, "riops": None, "wiops": 20}
    capped = _write_seconds(found, disk_tmp_path)
    # 40 writes at 20 a second: about 2 s (the kernel lets a first slice through).
    assert capped >= 1.0, f"capped writes took {capped:.2f}s (uncapped {free:.2f}s)"

    restored = iocap.clear(found, device, state)
    assert restored["limits"] == {"rbps": None, "wbps": None, "riops": 5000, "wiops": None}
    assert list(state.iterdir()) == []
    again = _write_seconds(found, disk_tmp_path)
    assert again < capped / 2, f"after the clear {again:.2f}s, capped {capped:.2f}s"
    # Clearing again changes nothing (what `rsdrill recover` may do after a revert).
    assert iocap.clear(found, device, state)["limits"]["riops"] is None


def test_a_second_cap_keeps_the_limits_from_before_the_first(
    pod_cgroup: PodCgroup, disk_tmp_path: Path
) -> None:
    found = pod_cgroup.container
    device = iocap.volume_device(found, str(disk_tmp_path))
    state = disk_tmp_path / "state"
    iocap.apply(found, device, iocap.Limits(riops=100), state)
    iocap.apply(found, device, iocap.Limits(wbps=1 << 20), state)
    assert iocap.current(found, device) == {"rbps": None, "wbps": 1 << 20, "riops": None,
                                            "wiops": None}  # fmt: skip
    assert iocap.clear(found, device, state)["limits"] == dict.fromkeys(
        ("rbps", "wbps", "riops", "wiops")
    )


def test_unknown_pod_or_container_is_named(pod_cgroup: PodCgroup) -> None:
    with pytest.raises(iocap.CapError, match="pod 0000 has no cgroup under"):
        iocap.find_cgroup(pod_cgroup.root, "0000", pod_cgroup.container_id)
    with pytest.raises(iocap.CapError, match="container abcdef has no cgroup under"):
        iocap.find_cgroup(pod_cgroup.root, pod_cgroup.pod_uid, "abcdef")


def test_cgroup_v2_io_max_text(tmp_path: Path) -> None:
    """On a v2 node the cap is one io.max line; a stand-in file tree (this machine is v1)."""
    uid = "1234-5678"
    container = tmp_path / "kubepods.slice" / f"kubepods-pod{uid.replace('-', '_')}.slice"
    container = container / "cri-containerd-feed.scope"
    container.mkdir(parents=True)
    (container / "cgroup.controllers").write_text("io memory\n")
    (container / "io.max").write_text("8:0 rbps=max wbps=max riops=300 wiops=max\n")
    assert iocap.find_cgroup(tmp_path, uid, "feed") == container
    iocap.apply(container, "8:0", iocap.Limits(wiops=50), tmp_path / "state")
    assert (container / "io.max").read_text() == "8:0 rbps=max wbps=max riops=max wiops=50\n"
    iocap.clear(container, "8:0", tmp_path / "state")
    assert (container / "io.max").read_text() == "8:0 rbps=max wbps=max riops=300 wiops=max\n"
