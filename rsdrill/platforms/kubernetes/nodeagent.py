"""The node agent: a small HTTPS service, one per node (an opt-in privileged DaemonSet,
manifests/node-agent/), that places and removes true I/O caps on a container's cgroup
(`iocap.py`) for `iops-throttle` with engine native.

Only the run's ServiceAccount may call it, with a token bound to the agent's audience
(`AUDIENCE`): rsdrill requests one for its own ServiceAccount (a TokenRequest, `TOKEN_LIFETIME_S`,
kept for the run) and never sends its own token, which the API server would accept from whoever
holds it (an agent, its certificate's holder). The agent checks each request's bearer token with
a TokenReview for that audience (its own ServiceAccount may create TokenReviews and nothing
else): a token of any other audience, the API server's included, is refused; the authenticated
user must be one of `--allow` (e.g. `system:serviceaccount:rsdrill:rsdrill`). No token or one
not valid for the agent: 401; another identity: 403, which names nobody (the agent is no oracle
of whose token a pod holds); the agent's log (stderr) names the refused user, never a token.

    python -m rsdrill.platforms.kubernetes.nodeagent \\
        --allow system:serviceaccount:rsdrill:rsdrill \\
        --tls-cert /tls/tls.crt --tls-key /tls/tls.key [--listen 0.0.0.0:10260]

Requests (JSON, POST): `/v1/cap` {pod_uid, container_id, volume_path, limits: {riops, wiops,
rbps, wbps}}, `/v1/clear` and `/v1/limits` {pod_uid, container_id, volume_path}. rsdrill's side
of it is `call()`.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rsdrill.platforms.kubernetes import iocap
from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError
from rsdrill.platforms.kubernetes.options import NODE_AGENT_PORT

DEFAULT_PORT = NODE_AGENT_PORT
AUDIENCE = "rsdrill-node-agent"
"""The audience of the tokens the agent accepts: a token for it is good for nothing else."""
TOKEN_LIFETIME_S = 600  # the shortest TokenRequest Kubernetes grants
REQUEST_TIMEOUT_S = 10.0
_MAX_BODY = 64 * 1024


class AgentError(Exception):
    """The agent refused or failed a request, or could not be reached (`status` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class AgentConfig:
    cgroup_root: Path
    state_dir: Path
    allowed: frozenset[str]
    proc: Path = Path("/proc")


class _Handler(BaseHTTPRequestHandler):
    server: AgentServer

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are not logged: a token must never reach a log by accident

    def do_POST(self) -> None:
        try:
            self._authorize()
            body = self._body()
            answer = self.server.handle(self.path, body)
        except AgentError as exc:
            self._send(exc.status or 500, {"message": str(exc)})
            return
        self._send(200, answer)

    def _authorize(self) -> None:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            raise AgentError("a bearer token is required", 401)
        user = self.server.reviewer(header[7:].strip())
        if user is None:
            raise AgentError(f"the token is not valid for the audience {AUDIENCE}", 401)
        if user not in self.server.config.allowed:
            # The caller is not told whose token it sent; the operator reading the log is.
            print(f"rsdrill-node-agent: refused {user} from {self.client_address[0]}: not in "
                  "--allow", file=sys.stderr, flush=True)  # fmt: skip
            raise AgentError("this identity may not use the node agent", 403)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise AgentError("request too large", 413)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise AgentError("the body is not JSON", 400) from None
        if not isinstance(body, dict):
            raise AgentError("the body must be a JSON object", 400)
        return body

    def _send(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class AgentServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], config: AgentConfig, kube: Kube,
                 tls: ssl.SSLContext) -> None:  # fmt: skip
        super().__init__(address, _Handler)
        self.config = config
        self.kube = kube
        self.tls = tls
        self.lock = threading.Lock()  # one cgroup change at a time

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake in the connection's own thread, with a deadline: on a wrapped
        # listening socket it runs in accept(), where one caller that never speaks holds off
        # every other, the revert that lifts a cap too. The deadline stays for the request.
        request.settimeout(REQUEST_TIMEOUT_S)
        try:
            connection = self.tls.wrap_socket(request, server_side=True)
        except OSError:  # ssl.SSLError included: not TLS, or too slow
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            # socketserver's own end of a request (it ends the raw socket, taken over by the
            # TLS one): FIN before close, so a reply to a body not read is not lost to a reset.
            self.shutdown_request(connection)

    def reviewer(self, token: str) -> str | None:
        """The token's user as the API server authenticates it for the agent's audience (a
        TokenReview), or None: a token for another audience (the API server's too) is not one
        the caller should have sent here."""
        try:
            status = self.kube.review_token(token, [AUDIENCE])
        except KubeError as exc:
            raise AgentError(f"TokenReview failed: {exc}", 503) from None
        # The review's audiences are those asked for that the token is valid for: checked, not
        # trusted to be implied by `authenticated`.
        if not status.get("authenticated") or AUDIENCE not in (status.get("audiences") or []):
            return None
        return str((status.get("user") or {}).get("username") or "") or None

    def handle(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            pod_uid, container_id = str(body["pod_uid"]), str(body["container_id"])
            volume_path = str(body["volume_path"])
            limits = iocap.Limits(**(body.get("limits") or {})) if path == "/v1/cap" else None
        except (KeyError, TypeError) as exc:
            raise AgentError(f"bad request: {exc}", 400) from None
        if path not in ("/v1/cap", "/v1/clear", "/v1/limits"):
            raise AgentError(f"no such request {path}", 404)
        config = self.config
        with self.lock:
            try:
                cgroup = iocap.find_cgroup(config.cgroup_root, pod_uid, container_id)
                device = iocap.volume_device(cgroup, volume_path, config.proc)
                if limits is not None:
                    return iocap.apply(cgroup, device, limits, config.state_dir)
                if path == "/v1/clear":
                    return iocap.clear(cgroup, device, config.state_dir)
                return {"cgroup": str(cgroup), "device": device,
                        "limits": iocap.current(cgroup, device)}  # fmt: skip
            except iocap.CapError as exc:
                raise AgentError(str(exc), 404) from None
            except OSError as exc:
                raise AgentError(f"cgroup: {exc}", 500) from None


def make_server(
    config: AgentConfig, kube: Kube, listen: tuple[str, int], tls: tuple[Path, Path]
) -> AgentServer:
    """The agent bound to `listen`, serving TLS with (certificate, key); not yet serving."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls)
    return AgentServer(listen, config, kube, context)


# -- rsdrill's side -----------------------------------------------------------------------------

SERVICE_ACCOUNT_ONLY = (
    "iops-throttle with engine native: the node agent admits a ServiceAccount's token bound to "
    "its audience, and rsdrill runs as {user}, no ServiceAccount: run it as the ServiceAccount "
    "the agent's --allow names (a kubeconfig with its token: kubectl create token)"
)
"""Why a user's identity is refused: its own token, sent instead, would be good against the API
server in the hands of every agent."""


def agent_token(kube: Kube) -> str:
    """The run's token for the node agent: its ServiceAccount's, bound to `AUDIENCE`, short
    lived, requested once and kept by `kube` for its life (KubeError if it cannot be had)."""
    return kube.audience_token(AUDIENCE, TOKEN_LIFETIME_S)


def call(
    url: str, token: str, path: str, body: dict[str, Any], ca_file: str | None
) -> dict[str, Any]:
    """POST a request to the agent at `url` with `token` (`agent_token`'s); its JSON answer."""
    context = ssl.create_default_context(cafile=ca_file)
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S, context=context) as r:
            return dict(json.loads(r.read() or b"{}"))
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read() or b"{}").get("message") or exc.reason
        except ValueError:
            message = exc.reason
        raise AgentError(f"node agent at {url}: {message} (HTTP {exc.code})", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AgentError(
            f"node agent at {url} unreachable: {reason} (is manifests/node-agent deployed?)"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rsdrill-node-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default=f"0.0.0.0:{DEFAULT_PORT}", help="address:port")
    parser.add_argument("--allow", action="append", required=True,
                        help="a user allowed to call (repeatable)")  # fmt: skip
    parser.add_argument("--tls-cert", required=True, type=Path)
    parser.add_argument("--tls-key", required=True, type=Path)
    parser.add_argument("--cgroup-root", default=Path("/sys/fs/cgroup"), type=Path)
    parser.add_argument("--state-dir", default=Path("/var/lib/rsdrill-node-agent"), type=Path)
    parser.add_argument("--proc", default=Path("/proc"), type=Path)
    parser.add_argument("--kubeconfig", help="default: the pod's ServiceAccount")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    root = args.cgroup_root
    if (root / "blkio").is_dir() and not (root / "cgroup.controllers").exists():
        root = root / "blkio"  # cgroup v1: the blkio hierarchy
    try:
        iocap.cgroup_version(root)
        kube = Kube(ClusterAccess(args.kubeconfig, in_cluster=args.kubeconfig is None))
        config = AgentConfig(root, args.state_dir, frozenset(args.allow), args.proc)
        server = make_server(config, kube, (host, int(port)), (args.tls_cert, args.tls_key))
    except (iocap.CapError, KubeError, OSError, ValueError, ssl.SSLError) as exc:
        print(f"rsdrill-node-agent: {exc}", file=sys.stderr)
        return 2
    print(f"rsdrill-node-agent: serving on {args.listen} ({root})", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
