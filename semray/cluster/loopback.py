"""Keep Ray Serve replicas off non-loopback interfaces in the embedded cluster.

Ray Serve 2.60 replicas always start an inter-deployment gRPC server on ``[::]:0`` (every
interface), even when handles do not use it. In the embedded single-node cluster
``connect`` sets ``SEMRAY_LOOPBACK_ONLY=1``, which worker processes inherit; importing
``semray.serving.deployments`` in a replica then rebinds that server to 127.0.0.1.
"""

from __future__ import annotations

import os
from typing import Any

LOOPBACK_ENV = "SEMRAY_LOOPBACK_ONLY"


def bind_serve_grpc_to_loopback() -> None:
    """Patch the replica's gRPC bind address (a no-op outside the embedded cluster)."""
    if os.environ.get(LOOPBACK_ENV) != "1":
        return
    try:
        from ray.serve._private import replica
    except ImportError:
        return
    original = replica.add_port_to_grpc_server  # type: ignore[attr-defined]  # private Serve API
    if getattr(original, "semray_loopback", False):
        return

    def loopback(server: Any, address: str) -> Any:
        host, _, port = address.rpartition(":")
        if host in ("[::]", "0.0.0.0", ""):
            address = f"127.0.0.1:{port}"
        return original(server, address)  # type: ignore[no-untyped-call]

    loopback.semray_loopback = True  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = loopback  # type: ignore[attr-defined]
