"""The one place rsdrill talks to the Kubernetes API (through the `kubernetes` package).

Every call has a deadline, answers plain dicts (the API's own JSON, the same whatever the
client package's version), and fails with `KubeError` carrying the API server's own message:
the permission it refused, the schema rule a resource broke, or why the server is unreachable.
Tokens and keys stay inside the client configuration and never reach a message.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import kubernetes.config as k8s_config
import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.utils import parse_quantity

from rsdrill.platforms.kubernetes.resources import ContainerLimits, ResourceType

REQUEST_TIMEOUT_S = 10.0


class KubeError(Exception):
    """The Kubernetes API refused or failed a call; `status` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach the cluster: non-secret, so a journal can carry it to `rsdrill recover`."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False

    def as_action(self) -> dict[str, Any]:
        return {
            "kubeconfig": self.kubeconfig,
            "context": self.context,
            "in_cluster": self.in_cluster,
        }

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> ClusterAccess:
        return cls(action.get("kubeconfig"), action.get("context"), bool(action.get("in_cluster")))


def _only_in_cluster(access: ClusterAccess) -> bool:
    """No kubeconfig named nor found, inside a pod: its service account is the credential."""
    return (
        access.kubeconfig is None
        and not os.environ.get("KUBECONFIG")
        and not Path(k8s_config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION).expanduser().exists()
        and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )


def _message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def _handshake_refusal(exc: ApiException) -> tuple[int, str]:
    """The status and API message of a refused exec upgrade: the websocket client reports it as
    `Handshake status <code> <reason> -+-+- <headers> -+-+- <body>` in an ApiException."""
    text = str(exc.reason or "")
    status = re.search(r"Handshake status (\d+)", text)
    message = re.search(r'"message":\s*"((?:[^"\\]|\\.)*)"', text)
    if message is not None:
        return int(status.group(1)) if status else 0, json.loads(f'"{message.group(1)}"')
    return int(status.group(1)) if status else 0, text.split(" -+-+- ")[0] or "exec refused"


def _exec_failure(status_text: str) -> tuple[str, int] | None:
    """None when the exec's status (a metav1.Status on its error channel) says it succeeded;
    else (`exit status N`, or the API server's or kubelet's message; the status code)."""
    try:
        status = json.loads(status_text) if status_text else {}
    except ValueError:
        return (status_text.strip(), 0) if status_text.strip() else None
    if not status or status.get("status") == "Success":
        return None
    causes = (status.get("details") or {}).get("causes") or []
    if status.get("reason") == "NonZeroExitCode":
        code = next((c.get("message") for c in causes if c.get("reason") == "ExitCode"), "?")
        return f"exit status {code}", 0
    message = status.get("message") or f"exec failed ({status_text})"
    return str(message), int(status.get("code") or 0)


def container_limits(pod: dict[str, Any], container: str) -> ContainerLimits:
    """The CPU and memory limits of `container` as `pod` (the API's JSON) states them."""
    for spec in (pod.get("spec") or {}).get("containers") or []:
        if spec.get("name") == container:
            limits = (spec.get("resources") or {}).get("limits") or {}
            cpu, memory = limits.get("cpu"), limits.get("memory")
            return ContainerLimits(
                cpu=float(parse_quantity(cpu)) if cpu is not None else None,
                memory_bytes=int(parse_quantity(memory)) if memory is not None else None,
            )
    raise KubeError(f"pod {pod['metadata']['name']} has no container {container}", 404)


class Kube:
    """A connected client; methods answer the API's JSON as dicts."""

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access
        try:
            if access.in_cluster or _only_in_cluster(access):
                configuration = k8s.Configuration()
                k8s_config.load_incluster_config(client_configuration=configuration)
                api = k8s.ApiClient(configuration)
            else:
                api = k8s_config.new_client_from_config(
                    config_file=access.kubeconfig, context=access.context, persist_config=False
                )
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            where = (
                "in-cluster service account"
                if access.in_cluster
                else (f"kubeconfig {access.kubeconfig or '(default)'}")
            )
            context = f", context {access.context}" if access.context else ""
            raise KubeError(f"cannot load the {where}{context}: {exc}") from None
        # One attempt per call: the caller's deadline governs, not urllib3's retries.
        api.configuration.retries = False
        # The environment's proxy resolved once, at connection: a token's hook resets the host
        # before every call, and the host setter would read the proxy variables again each time.
        api.configuration.proxy = api.configuration.proxy
        self.server = api.configuration.host
        self.api = api
        self._username: str | None = None
        # audience -> (token, when to request the next one), on the monotonic clock.
        self._tokens: dict[str, tuple[str, float]] = {}
        self._tokens_lock = threading.Lock()

    # Each API class loads its models on first use (seconds for CoreV1Api): only those a task
    # needs are made, so `rsdrill recover` deleting a chaos object never loads the core API.
    @cached_property
    def core(self) -> Any:
        return k8s.CoreV1Api(self.api)

    @cached_property
    def custom(self) -> Any:
        return k8s.CustomObjectsApi(self.api)

    @cached_property
    def auth(self) -> Any:
        return k8s.AuthorizationV1Api(self.api)

    @cached_property
    def authn(self) -> Any:
        return k8s.AuthenticationV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    def username(self) -> str:
        """Who the API server says this identity is (a SelfSubjectReview, which every
        authenticated identity may make; served from Kubernetes 1.28)."""
        if self._username is None:
            review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            answer = self.call(self.authn.create_self_subject_review, review)
            user = ((answer or {}).get("status") or {}).get("userInfo") or {}
            self._username = str(user.get("username") or "")
        return self._username

    def service_account(self) -> tuple[str, str] | None:
        """(namespace, name) of the ServiceAccount this identity is; None for a user (a
        kubeconfig's own token or certificate)."""
        prefix, _, rest = self.username().partition("system:serviceaccount:")
        namespace, _, name = rest.partition(":")
        return (namespace, name) if not prefix and namespace and name else None

    def audience_token(self, audience: str, lifetime_s: int) -> str:
        """A token of this identity's ServiceAccount valid for `audience` only and for
        `lifetime_s` (a TokenRequest), for a service that checks it with a TokenReview of that
        audience: the identity's own token, good against the API server, never leaves. Kept
        and reused until four fifths of its life are gone, so calls do not each ask for one.
        A user that is no ServiceAccount cannot have one: KubeError."""
        with self._tokens_lock:
            kept = self._tokens.get(audience)
            if kept is not None and time.monotonic() < kept[1]:
                return kept[0]
            account = self.service_account()
            if account is None:
                raise KubeError(
                    f"a token bound to the audience {audience} is a ServiceAccount's, and "
                    f"this identity is {self.username() or 'anonymous'}, no ServiceAccount",
                    403,
                )
            started = time.monotonic()
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"audiences": [audience], "expirationSeconds": lifetime_s},
            }
            answer = self.call(
                self.core.create_namespaced_service_account_token, account[1], account[0], request
            )
            token = str(answer["status"]["token"])
            # The server may shorten the life asked for (its maximum): the answer's spec says.
            granted = int((answer.get("spec") or {}).get("expirationSeconds") or lifetime_s)
            self._tokens[audience] = (token, started + granted * 0.8)
            return token

    def review_token(self, token: str, audiences: Sequence[str]) -> dict[str, Any]:
        """The API server's TokenReview of `token` for `audiences`: its status (`authenticated`,
        `user`, and `audiences`, those of `audiences` the token is valid for)."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": list(audiences)},
        }
        return dict(self.call(self.authn.create_token_review, review).get("status") or {})

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call an API method with a deadline; its JSON as dicts (None for an empty body)."""
        try:
            response = method(
                *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs
            )
        except ApiException as exc:
            raise KubeError(_message(exc), exc.status or 0, exc.reason or "") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(
                f"cannot reach the Kubernetes API at {self.server}: {type(exc).__name__}: {exc}"
            ) from None
        data = response.data
        return json.loads(data) if data else None

    # -- discovery and permissions -------------------------------------------------------

    def served_resources(self, group: str, version: str) -> set[str] | None:
        """The resource plurals an API group version serves, or None when it is not served
        (its CRDs are not installed). Discovery is open to every authenticated identity."""
        try:
            listing = self.call(self.custom.get_api_resources, group, version)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return {r["name"] for r in listing.get("resources", []) if "/" not in r["name"]}

    def allowed(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        group: str = "",
        subresource: str = "",
        name: str = "",
    ) -> bool:
        """Whether this identity may do `verb` on `resource` (the one named `name`, if given; a
        SelfSubjectAccessReview, which every authenticated identity may ask)."""
        attributes: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attributes["namespace"] = namespace
        if subresource:
            attributes["subresource"] = subresource
        if name:
            attributes["name"] = name
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = self.call(self.auth.create_self_subject_access_review, review)
        return bool(answer.get("status", {}).get("allowed"))

    # -- custom resources ------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self.call(
                self.custom.create_namespaced_custom_object,
                rtype.group,
                rtype.version,
                namespace,
                rtype.plural,
                body,
            )
        )

    def get(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """The resource, or None when it does not exist."""
        try:
            return dict(
                self.call(
                    self.custom.get_namespaced_custom_object,
                    rtype.group,
                    rtype.version,
                    namespace,
                    rtype.plural,
                    name,
                )
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, rtype: ResourceType, namespace: str) -> list[dict[str, Any]]:
        answer = self.call(
            self.custom.list_namespaced_custom_object,
            rtype.group,
            rtype.version,
            namespace,
            rtype.plural,
        )
        return list(answer.get("items", []))

    def patch(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        body: dict[str, Any],
        *,
        status: bool = False,
    ) -> dict[str, Any]:
        method = (
            self.custom.patch_namespaced_custom_object_status
            if status
            else self.custom.patch_namespaced_custom_object
        )
        return dict(
            self.call(method, rtype.group, rtype.version, namespace, rtype.plural, name, body)
        )

    def delete(self, rtype: ResourceType, namespace: str, name: str) -> bool:
        """Ask for deletion; False when it was already gone."""
        try:
            self.call(
                self.custom.delete_namespaced_custom_object,
                rtype.group,
                rtype.version,
                namespace,
                rtype.plural,
                name,
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def wait_gone(self, rtype: ResourceType, namespace: str, name: str, timeout_s: float) -> None:
        """Until the resource no longer exists (its finalizers ran: the fault was recovered)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.get(rtype, namespace, name)
            if found is None:
                return
            if time.monotonic() >= deadline:
                finalizers = found.get("metadata", {}).get("finalizers") or []
                waiting = (
                    f" (finalizers still pending: {', '.join(finalizers)})" if (finalizers) else ""
                )
                raise KubeError(
                    f"{rtype.kind} {namespace}/{name} still exists "
                    f"{timeout_s:g}s after its deletion{waiting}"
                )
            time.sleep(0.2)

    # -- pods and nodes --------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.call(self.core.read_namespaced_pod, name, namespace))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def pods(
        self, namespace: str | None, *, labels: str | None = None, fields: str | None = None
    ) -> builtins.list[dict[str, Any]]:  # `list` in this class is Kube.list
        kwargs = {k: v for k, v in (("label_selector", labels), ("field_selector", fields)) if v}
        if namespace is None:
            answer = self.call(self.core.list_pod_for_all_namespaces, **kwargs)
        else:
            answer = self.call(self.core.list_namespaced_pod, namespace, **kwargs)
        return list(answer.get("items", []))

    def event_messages(self, namespace: str, uid: str, reason: str) -> builtins.list[str]:
        """The messages of the Events of `reason` recorded on the object `uid`."""
        fields = f"involvedObject.uid={uid},reason={reason}"
        answer = self.call(self.core.list_namespaced_event, namespace, field_selector=fields)
        return [str(e.get("message") or "") for e in answer.get("items", [])]

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> bool:
        try:
            self.call(
                self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_s
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def evict(self, namespace: str, name: str, grace_s: int | None) -> None:
        """Evict a pod through the eviction API (which honours PodDisruptionBudgets: a budget
        that forbids it answers 429)."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_s is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_s}
        self.call(self.core.create_namespaced_pod_eviction, name, namespace, body)

    def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str]) -> str:
        """Run `argv` in the pod's container through the pods/exec subresource (a websocket the
        API server relays to the pod's kubelet); its standard output. A non-zero exit raises
        KubeError with the command's standard error; so does an API server that cannot reach
        the kubelet, with the server's own message."""
        from kubernetes.stream import stream
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        try:
            channel = stream(
                self.core.connect_get_namespaced_pod_exec, pod, namespace, command=argv,
                container=container, stdin=False, stdout=True, stderr=True, tty=False,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S,
            )  # fmt: skip
        except ApiException as exc:
            status, message = _handshake_refusal(exc)
            raise KubeError(message, status) from None
        try:
            channel.run_forever(timeout=REQUEST_TIMEOUT_S)
            if channel.is_open():
                raise KubeError(f"`{argv[0]}` in pod {namespace}/{pod} still running after "
                                f"{REQUEST_TIMEOUT_S:g}s")  # fmt: skip
            out, err = channel.read_stdout(), channel.read_stderr()
            status = channel.read_channel(ERROR_CHANNEL)
        finally:
            channel.close()
        failure = _exec_failure(status)
        if failure is not None:
            said = f": {err.strip() or out.strip()}" if (err.strip() or out.strip()) else ""
            raise KubeError(f"{failure[0]} in pod {namespace}/{pod}{said}", failure[1])
        return str(out)

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.call(self.core.read_node, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def set_unschedulable(self, name: str, unschedulable: bool) -> None:
        self.call(self.core.patch_node, name, {"spec": {"unschedulable": unschedulable}})

    def delete_node(self, name: str) -> bool:
        try:
            self.call(self.core.delete_node, name)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True
