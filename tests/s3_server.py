"""A real S3 endpoint for tests: moto's S3 server on 127.0.0.1 (a free port), fake credentials only.

``S3Server.start()`` serves one versioned bucket; ``uri(prefix)`` names a state URI in it and
``endpoint`` is what ``Settings.state_endpoint`` takes. Versioning is how a test tells whether
an object was put twice (every put is a version): ``versions()`` counts them per key.
``environ`` holds the fake credentials the store's processes need (pyarrow reads them from the
environment, as on a real cluster); ``SECRETS`` are the strings a test greps for in state
folders, store objects and logs, to check no credential leaks.

>>> with S3Server.start() as server:  # doctest: +SKIP
...     Settings(state_uri=server.uri("semray"), state_endpoint=server.endpoint)
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

BUCKET = "semray-test"
FAKE_KEY_ID = "AKIAFAKESEMRAYTEST42"
FAKE_SECRET = "fake/SemraySecretKeyNeverLogged0000000042"
SECRETS = (FAKE_KEY_ID, FAKE_SECRET)
ENVIRON = {
    "AWS_ACCESS_KEY_ID": FAKE_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # never ask an instance metadata service for credentials
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class S3Server:
    """A running moto S3 server and a boto3 client of it (for the test's own checks)."""

    endpoint: str
    client: Any

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[S3Server]:
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        saved = {name: os.environ.get(name) for name in ENVIRON}
        os.environ.update(ENVIRON)
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            endpoint = f"http://127.0.0.1:{port}"
            client = boto3.client("s3", endpoint_url=endpoint)
            client.create_bucket(Bucket=BUCKET)
            client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
            yield cls(endpoint, client)
        finally:
            server.stop()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def uri(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def versions(self, prefix: str) -> Counter[str]:
        """Puts per key under ``prefix`` (deletes excluded): a key put twice counts 2."""
        counts: Counter[str] = Counter()
        for page in self.client.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix):
            for version in page.get("Versions", []):
                counts[version["Key"]] += 1
        return counts

    def objects(self, prefix: str) -> dict[str, bytes]:
        """The current objects under ``prefix`` and their bytes."""
        found: dict[str, bytes] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = self.client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        return found
