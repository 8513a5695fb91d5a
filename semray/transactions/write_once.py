"""Write-once puts into the state store: an object under a name that holds none yet, or a refusal.

The store's objects that are never rewritten (journal segments, batch files, commit objects, the
response cache's segments) are named per writer, so no two writers should ever put one name. pyarrow's
filesystems cannot check that: their put overwrites. ``put_once`` does, where the store can:

* **local (``file://``)**: the bytes go to a temporary file in the target's folder, are fsync'd,
  and are then hard-linked to the name; ``link`` fails with ``EEXIST`` when the name exists, atomically,
  and a reader never sees a partly written object (the temporary file, ``<name>.<pid>.<random>.tmp``,
  which no reader lists, is removed either way);
* **S3 (``s3://``)**: a ``PutObject`` with ``If-None-Match: *`` (S3's conditional writes; MinIO and
  moto's S3 server honour it too), sent with boto3 since pyarrow's S3 filesystem has no conditional put.
  boto3 is imported at the first such put; without it the put fails with what to install. The endpoint
  and region are those pyarrow opened (``endpoint_override``/``scheme`` of the URI, the filesystem's
  region; else boto3's ``AWS_ENDPOINT_URL``); credentials are boto3's, read from the same environment;
* **any other store** (``gs://``, ``abfs://``, fsspec's): a check, then a plain put. Not atomic: two
  writers within that window can both put, the second replacing the first.

A refused put raises ``ObjectExistsError`` and leaves the stored object as it was.

>>> put_once(open_store("s3://bucket/semray"), "bucket/semray/cache/segments/x.jsonl.gzip", b"...")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from semray.transactions.errors import ObjectExistsError, TransactionError

if TYPE_CHECKING:
    from semray.transactions.remote import StateStore

CONFLICT_RETRIES = 3
"""Tries of a conditional put S3 answers 409 (``ConditionalRequestConflict``: another conditional put of
that name is in flight); the next try then meets the object that won (412)."""


def put_once(store: StateStore, path: str, data: bytes) -> None:
    """Put ``data`` at ``path`` (a path of ``store.fs``) unless an object is there: ``ObjectExistsError``."""
    kind = store.fs.type_name
    if kind == "local":
        if not _linked_once(path, data):
            raise _exists(store, path)
    elif kind == "s3":
        _put_if_none_match(store, path, data)
    else:
        if store.exists(path):
            raise _exists(store, path)
        store.write(path, data)


def _exists(store: StateStore, path: str) -> ObjectExistsError:
    return ObjectExistsError(
        f"{path} in {store.uri} already exists and is written once: this put was refused, the stored object "
        "is unchanged (two writers chose one name, or one writer wrote it twice)"
    )


def _linked_once(path: str, data: bytes) -> bool:
    """Whether ``data`` was linked to ``path`` (False: a file was there, left as it was)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    temporary = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(temporary)


def _put_if_none_match(store: StateStore, path: str, data: bytes) -> None:
    bucket, _, key = path.partition("/")
    client = _s3_client(_s3_endpoint(store.uri), getattr(store.fs, "region", None) or None)
    from botocore.exceptions import BotoCoreError, ClientError

    for _try in range(CONFLICT_RETRIES):
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return
        except ClientError as error:
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = error.response.get("Error", {}).get("Code")
            if status == 412 or code == "PreconditionFailed":
                raise _exists(store, path) from None
            if status != 409:
                raise TransactionError(f"cannot put {path} in {store.uri}: {code}: {error}") from None
        except BotoCoreError as error:
            raise TransactionError(f"cannot put {path} in {store.uri}: {error}") from None
    raise TransactionError(f"cannot put {path} in {store.uri}: conditional puts of it kept conflicting (409)")


def _s3_endpoint(uri: str) -> str | None:
    """The endpoint URL pyarrow's URI options name (``endpoint_override``, ``scheme``), None for boto3's own.

    >>> _s3_endpoint("s3://b/p?endpoint_override=127.0.0.1%3A9000&scheme=http")
    'http://127.0.0.1:9000'
    """
    options = parse_qs(urlsplit(uri).query)
    if "endpoint_override" not in options:
        return None
    scheme = options.get("scheme", ["https"])[0]
    return f"{scheme}://{options['endpoint_override'][0]}"


@functools.lru_cache(maxsize=8)
def _s3_client(endpoint: str | None, region: str | None) -> Any:
    try:
        import boto3
    except ImportError:
        raise TransactionError(
            "writing write-once objects to an s3:// state store needs boto3 (pyarrow's S3 filesystem cannot "
            "put an object only if none exists): pip install boto3, or pip install 'semray[s3]'"
        ) from None
    return boto3.client("s3", endpoint_url=endpoint, region_name=region)
