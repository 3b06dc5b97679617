"""The fleet's store in a Kubernetes namespace (`kubernetes://NAMESPACE`), for runs inside the
cluster: the lever's events in the ConfigMap `rsdrill-lever` (one data key per event, added by
a patch, so engaging never overwrites another event), and each cluster's lease a
`coordination.k8s.io/v1` Lease that `kubectl get lease` shows with its holder.

Every write of a Lease names the resourceVersion it read, so the API server decides a race:
of runs reaching for one cluster, one write succeeds and the others get 409 Conflict. The
signed record (`rsdrill.fleet.lease`) rides in an annotation; RBAC decides who may write
there, the fleet key who counts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import secrets
import time
from typing import TYPE_CHECKING, Any

from rsdrill.fleet.store import KUBERNETES_SCHEME as SCHEME
from rsdrill.fleet.store import FleetStoreError

if TYPE_CHECKING:
    from rsdrill.platforms.kubernetes.client import Kube

LEVER_CONFIGMAP = "rsdrill-lever"
RECORD = "rsdrill.io/lease"
CLUSTER = "rsdrill.io/cluster"
_LEASES = ("coordination.k8s.io", "v1", "leases")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def lease_name(cluster: str) -> str:
    """A DNS name for the cluster's Lease (a cluster name is a member list or free text)."""
    return "rsdrill-" + hashlib.sha256(cluster.encode()).hexdigest()[:40]


def _micro_time(epoch: float) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds, in UTC."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeFleetStore:
    """In a namespace of the cluster the run reaches with its kubeconfig (or, in a pod, its
    ServiceAccount)."""

    def __init__(self, location: str) -> None:
        self.namespace = location.removeprefix(SCHEME).strip("/")
        if not _NAMESPACE.match(self.namespace) or len(self.namespace) > 63:
            raise FleetStoreError(f"{location}: want {SCHEME}NAMESPACE (a namespace's name)")
        try:
            from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError
        except ImportError:
            raise FleetStoreError(f"{location}: needs the kubernetes extra: pip install "
                                  "'rsdrill[kubernetes]'") from None  # fmt: skip
        self._error = KubeError
        try:
            # KUBECONFIG as it is now: the client package reads it once, when first imported.
            self._kube: Kube = Kube(ClusterAccess(os.environ.get("KUBECONFIG") or None))
        except KubeError as exc:
            raise FleetStoreError(f"{location}: {exc}") from None

    @property
    def where(self) -> str:
        return f"{SCHEME}{self.namespace} ({self._kube.server})"

    @property
    def hosts(self) -> tuple[str, ...]:
        return ()

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        """The call's JSON; None for 404; FleetStoreError for any other refusal but 409,
        which is re-raised for the caller to read as a lost race."""
        try:
            return self._kube.call(method, *args, **kwargs)
        except self._error as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise
            raise FleetStoreError(f"{self.where}: {what}: {exc}") from None

    # -- the lever ---------------------------------------------------------------------------

    def lever_events(self, limit: int) -> list[dict[str, Any]]:
        found = self._call("read the lever", self._kube.core.read_namespaced_config_map,
                           LEVER_CONFIGMAP, self.namespace)  # fmt: skip
        data = (found or {}).get("data") or {}
        events = []
        for name in sorted(data, reverse=True):
            try:
                event = json.loads(data[name])
            except ValueError:
                event = {}  # someone else's text: counted as not signed
            events.append(event if isinstance(event, dict) else {})
        # By the signed `at`, not the key: anyone who may patch the ConfigMap can copy an old
        # genuine event under a newer key. Stable, so the key breaks a tie.
        events.sort(key=lambda e: e["at"] if isinstance(e.get("at"), str) else "", reverse=True)
        return events[:limit]

    def add_lever_event(self, event: dict[str, Any]) -> None:
        name = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
        patch = {"data": {name: json.dumps(event)}}
        core = self._kube.core
        if self._call("engage the lever", core.patch_namespaced_config_map,
                      LEVER_CONFIGMAP, self.namespace, patch) is not None:  # fmt: skip
            return
        body = {"apiVersion": "v1", "kind": "ConfigMap", **patch,
                "metadata": {"name": LEVER_CONFIGMAP,
                             "labels": {"app.kubernetes.io/name": "rsdrill"}}}  # fmt: skip
        try:
            self._call("create the lever", core.create_namespaced_config_map,
                       self.namespace, body)  # fmt: skip
        except self._error:  # 409: created by another in between; add to it
            self._call("engage the lever", core.patch_namespaced_config_map,
                       LEVER_CONFIGMAP, self.namespace, patch)  # fmt: skip

    # -- leases ------------------------------------------------------------------------------

    def _lease_object(self, cluster: str) -> dict[str, Any] | None:
        group, version, plural = _LEASES
        found = self._call("read the lease", self._kube.custom.get_namespaced_custom_object,
                           group, version, self.namespace, plural, lease_name(cluster))  # fmt: skip
        return None if found is None else dict(found)

    @staticmethod
    def _record(lease: dict[str, Any] | None) -> dict[str, Any] | None:
        """The lease's record; None when there is no lease or it was released."""
        if lease is None or not (lease.get("spec") or {}).get("holderIdentity"):
            return None
        text = (lease["metadata"].get("annotations") or {}).get(RECORD)
        try:
            record = json.loads(text) if text else {}
        except ValueError:
            record = {}
        return record if isinstance(record, dict) else {}

    def lease(self, cluster: str) -> dict[str, Any] | None:
        return self._record(self._lease_object(cluster))

    def _write(self, cluster: str, lease: dict[str, Any] | None,
               record: dict[str, Any] | None) -> bool:  # fmt: skip
        """Create the Lease, or replace the one read (by its resourceVersion); False when
        another write came first. `record` None releases it."""
        now = time.time()
        spec: dict[str, Any] = {"holderIdentity": None}
        annotations = {CLUSTER: cluster}
        if record is not None:
            spec = {
                "holderIdentity": f"{record.get('experiment')} on {record.get('host')} "
                f"(pid {record.get('pid')})",
                "leaseDurationSeconds": max(1, round(float(record["until"]) - now)),
                "renewTime": _micro_time(now),
            }
            annotations[RECORD] = json.dumps(record)
        metadata: dict[str, Any] = {"name": lease_name(cluster), "annotations": annotations,
                                    "labels": {"app.kubernetes.io/name": "rsdrill"}}  # fmt: skip
        if lease is not None:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": spec}  # fmt: skip
        custom = self._kube.custom
        try:
            if lease is None:
                self._call("take the lease", custom.create_namespaced_custom_object,
                           *_LEASES[:2], self.namespace, _LEASES[2], body)  # fmt: skip
            else:
                found = self._call("write the lease", custom.replace_namespaced_custom_object,
                                   *_LEASES[:2], self.namespace, _LEASES[2],
                                   metadata["name"], body)  # fmt: skip
                return found is not None  # None: deleted meanwhile
        except self._error:  # 409: another run's write came first
            return False
        return True

    def put_lease(self, cluster: str, record: dict[str, Any],
                  replacing: dict[str, Any] | None) -> bool:  # fmt: skip
        lease = self._lease_object(cluster)
        current = self._record(lease)
        if (current is None) != (replacing is None):
            return False
        if current is not None and replacing is not None and (
                current.get("token") != replacing.get("token")):  # fmt: skip
            return False
        return self._write(cluster, lease, record)

    def drop_lease(self, cluster: str, token: str) -> None:
        lease = self._lease_object(cluster)
        current = self._record(lease)
        if current is not None and current.get("token") == token:
            self._write(cluster, lease, None)  # a lost race: the lease is another's now

    def close(self) -> None:
        self._kube.close()
