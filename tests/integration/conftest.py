"""Fixtures for tests that run real sandbox member processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology


@pytest.fixture
def replset(sandbox_dir: Path, free_port_base: Callable[[int], int]) -> Callable[..., Sandbox]:
    """Start an emulator replica set; fast elections unless the test asks for MongoDB's defaults."""

    def make(topology: str = "rs3", election_timeout_ms: int = 1000, **options: Any) -> Sandbox:
        spec = build_topology(
            topology,
            port_base=free_port_base(3),
            settings=Settings(election_timeout_ms=election_timeout_ms),
            **options,
        )
        return up(sandbox_dir, spec, EmulatorEngine())

    return make


@pytest.fixture
def client_for() -> Iterator[Callable[..., MongoClient[Any]]]:
    """MongoClients with short timeouts, all closed after the test."""
    clients: list[MongoClient[Any]] = []

    def make(target: Sandbox | str, **kwargs: Any) -> MongoClient[Any]:
        options: dict[str, Any] = {
            "serverSelectionTimeoutMS": 20_000,
            "connectTimeoutMS": 1000,
            "socketTimeoutMS": 5000,
        }
        if isinstance(target, str):
            options["directConnection"] = True
            uri = f"mongodb://{target}/"
        else:
            uri = target.uri
        client: MongoClient[Any] = MongoClient(uri, **{**options, **kwargs})
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
