"""hello and the login commands: what a client learns and proves before anything else."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bson.binary import Binary

from rsdrill.sandbox.certs import CLIENT_SUBJECT, MEMBER_SUBJECT
from rsdrill.scram import ScramError, ScramServer
from rsdrill_emulator import (
    aws_login,
    wallclock,
)
from rsdrill_emulator.commands.base import Request, claimed
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.node import MemberState, Node

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands


@command("hello", "isMaster", "ismaster")
async def _hello(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    tv = req.body.get("topologyVersion")
    max_await = req.body.get("maxAwaitTimeMS")
    if (tv is None) != (max_await is None):
        raise CommandError(31368, "hello needs both or neither of topologyVersion and "
                                  "maxAwaitTimeMS")  # fmt: skip
    if tv is not None and max_await is not None:
        await _await_topology_change(node, tv, int(max_await))
    return hello_reply(node, req)


async def _await_topology_change(node: Node, tv: dict[str, Any], max_await_ms: int) -> None:
    """Awaitable hello (4.4+): answer at once if the client's topologyVersion is not the
    current one, otherwise when it changes or after maxAwaitTimeMS."""
    if max_await_ms < 0:
        raise CommandError(31373, "maxAwaitTimeMS must be a non-negative integer")
    if tv.get("processId") != node.process_id:
        return  # the client knows an earlier incarnation of this member
    counter = int(tv.get("counter", -1))
    if counter > node.topology_counter:
        raise CommandError(31382, f"topologyVersion counter {counter} is greater than the "
                                  f"server's, {node.topology_counter}")  # fmt: skip
    if counter == node.topology_counter:
        await node.topology_changed.wait(max_await_ms / 1000)


def hello_reply(node: Node, req: Request) -> dict[str, Any]:
    """hello / isMaster as a replica-set member (or a standalone server) answers it."""
    spec = node.spec
    legacy = req.name.lower() == "ismaster"
    writable = node.state is MemberState.PRIMARY and node.writable
    reply: dict[str, Any] = {
        "topologyVersion": node.topology_version(),
        "ismaster" if legacy else "isWritablePrimary": writable,
        "secondary": node.state is MemberState.SECONDARY and not spec.standalone,
    }
    if req.body.get("helloOk") and spec.handshake != "legacy":  # a server without hello: no
        reply["helloOk"] = True
    asked = req.body.get("saslSupportedMechs")
    if node.auth_keys is not None and isinstance(asked, str):
        user = asked.partition(".")[2]
        reply["saslSupportedMechs"] = [m for m, users in node.auth_keys.items() if user in users]
    reply.update(
        maxBsonObjectSize=16 * 1024 * 1024,
        maxMessageSizeBytes=48_000_000,
        maxWriteBatchSize=100_000,
        localTime=wallclock.now(),
        logicalSessionTimeoutMinutes=30,
        connectionId=req.connection_id,
        minWireVersion=0,
        maxWireVersion=claimed(spec).max_wire,
        readOnly=False,
    )
    if spec.standalone:  # mongod without --replSet: nothing of a replica set
        return reply
    if node.state is MemberState.REMOVED:  # as mongod: a member of no config (drivers: a ghost)
        reply.update(isreplicaset=True, info="Does not have a valid replica set config")
        return reply
    reply.update(
        setName=spec.set_name,
        setVersion=node.config_id.version,
        hosts=[m.host for m in spec.members if not m.arbiter_only and m.priority > 0],
        me=node.host,
    )
    passives = [m.host for m in spec.members if not m.arbiter_only and m.priority == 0]
    if passives:
        reply["passives"] = passives
    arbiters = [m.host for m in spec.members if m.arbiter_only]
    if arbiters:
        reply["arbiters"] = arbiters
    if node.primary_host:
        reply["primary"] = node.primary_host
    if node.is_arbiter:
        reply["arbiterOnly"] = True
    if node.me.tags:  # as mongod: drivers select by them (read preference tag sets)
        reply["tags"] = node.me.tags
    if node.state is MemberState.PRIMARY:
        reply["electionId"] = node.election_id()
    if not node.is_arbiter:
        reply["lastWrite"] = {
            "opTime": node.last_applied.document(),
            "lastWriteDate": node.last_applied_wall.replace(microsecond=0),
            "majorityOpTime": node.commit_point.document(),
            "majorityWriteDate": node.commit_point.date(),
        }
    return reply


@command("saslStart")
async def _sasl_start(cmds: Commands, req: Request) -> dict[str, Any]:
    keys = cmds.node.auth_keys
    mechanism = req.body.get("mechanism")
    if mechanism == aws_login.MECHANISM and keys is not None and cmds.node.spec.aws_sts_url:
        payload = bytes(req.body.get("payload") or b"")
        cmds.logins[req.connection_id], reply = aws_login.start(
            cmds.node.spec.aws_sts_url, req.db, payload
        )
        return reply
    if keys is None:  # as mongod without users: nobody to log in as
        raise CommandError(18, "Authentication failed.")
    if mechanism not in keys:
        raise CommandError(2, f"mechanism {mechanism!r} is not supported")
    login = ScramServer(mechanism, keys[mechanism])
    try:
        payload = login.first(bytes(req.body.get("payload") or b""))
    except ScramError:
        raise CommandError(18, "Authentication failed.") from None
    cmds.logins[req.connection_id] = login
    return {"conversationId": 1, "done": False, "payload": Binary(payload)}


@command("saslContinue")
async def _sasl_continue(cmds: Commands, req: Request) -> dict[str, Any]:
    login = cmds.logins.get(req.connection_id)
    if req.connection_id in cmds.logged_in:  # the client's last, empty step
        return {"conversationId": 1, "done": True, "payload": Binary(b"")}
    if login is None:
        raise CommandError(17, "no SASL session state found")
    if isinstance(login, aws_login.AwsConversation):
        del cmds.logins[req.connection_id]
        payload = bytes(req.body.get("payload") or b"")
        user, reply = await aws_login.finish(login, payload, cmds.node.aws_users, cmds.node.events)
        cmds.logged_in[req.connection_id] = (user, "$external")
        return reply
    try:
        payload = login.final(bytes(req.body.get("payload") or b""))
    except ScramError:
        cmds.logins.pop(req.connection_id, None)
        raise CommandError(18, "Authentication failed.") from None
    cmds.logged_in[req.connection_id] = (login.user, req.db)
    del cmds.logins[req.connection_id]
    # Done at once, as with skipEmptyExchange; a client that sends the empty step anyway is
    # answered above.
    return {"conversationId": 1, "done": True, "payload": Binary(payload)}


@command("authenticate")
async def _authenticate(cmds: Commands, req: Request) -> dict[str, Any]:
    """MONGODB-X509: the user is the subject of the certificate the connection presented."""
    if req.body.get("mechanism") != "MONGODB-X509":
        raise CommandError(2, f"unsupported mechanism {req.body.get('mechanism')!r}")
    if req.db != "$external":
        raise CommandError(2, "MONGODB-X509 authentication must be on the $external database")
    subject = cmds.certificate_subjects.get(req.connection_id)
    if not cmds.node.spec.x509 or subject is None:
        raise CommandError(18, "No verified subject name available from client")
    named = req.body.get("user")
    if named is not None and named != subject:
        raise CommandError(18, "There is no x.509 client certificate matching the user.")
    if subject not in (CLIENT_SUBJECT, MEMBER_SUBJECT):
        raise CommandError(11, f'Could not find user "{subject}" for db "$external"')
    cmds.logged_in[req.connection_id] = (subject, "$external")
    return {"dbname": "$external", "user": subject}


@command("connectionStatus")
async def _connection_status(cmds: Commands, req: Request) -> dict[str, Any]:
    """Who this connection is logged in as, with its roles and (showPrivileges) privileges."""
    login = cmds.logged_in.get(req.connection_id)
    users, held = [], []
    if login is not None:
        users = [{"user": login[0], "db": login[1]}]
        held = [{"role": role, "db": db} for role, db in cmds.node.roles.get(login[0], [])]
    info: dict[str, Any] = {"authenticatedUsers": users, "authenticatedUserRoles": held}
    if req.body.get("showPrivileges"):
        info["authenticatedUserPrivileges"] = cmds.privileges_of(req.connection_id)
    return {"authInfo": info}


@command("usersInfo")
async def _users_info(cmds: Commands, req: Request) -> dict[str, Any]:
    """The users defined on this database (SCRAM users on admin, certificate users on
    $external), or the ones named; any logged-in user may ask (mongod: viewUser, or itself)."""
    asked = req.body.get("usersInfo")
    names: set[str | None] | None = {asked} if isinstance(asked, str) else None
    if isinstance(asked, dict):
        names = {asked.get("user")}
    certificates = {CLIENT_SUBJECT, MEMBER_SUBJECT}
    users = []
    for user, held in cmds.node.roles.items():
        db = "$external" if user in certificates else "admin"
        if db == req.db and (names is None or user in names):
            roles = [{"role": role, "db": role_db} for role, role_db in held]
            users.append({"_id": f"{db}.{user}", "user": user, "db": db, "roles": roles})
    return {"users": users}
