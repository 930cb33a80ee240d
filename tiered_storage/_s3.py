"""`S3Store`: offloaded ledgers as objects of an S3 bucket (the ``aws-s3`` and ``S3`` drivers).

Any S3-compatible service works: AWS S3 (``region``), or another one at ``endpoint``
(``s3ManagedLedgerOffloadServiceEndpoint``; path-style addressing, so a bucket name needs no DNS).
Credentials are ``s3ManagedLedgerOffloadCredentialId`` / ``...Secret`` when set, otherwise
botocore's default chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``~/.aws/credentials``,
instance roles), as Pulsar's offloader relies on AWS's default chain.

The client is boto3's (botocore signs with SigV4); each call runs on a worker thread bounded by
the store's limiter (`BlobStore` Rule 4), and botocore retries transient failures itself
(``standard`` mode, 3 attempts) with short connect / read timeouts, so a store that is down fails a
call within seconds with `TierUnavailable` rather than hanging an offload.

Uploads are multipart once they exceed one part (``part_size`` bytes, at least S3's 5 MiB
minimum): parts are buffered (one part per upload in memory), each sent with its Content-MD5 so the
service refuses a part damaged on the way, and the upload is completed (or aborted) as a whole
(Rule 1). A smaller object is one PUT, also with its Content-MD5.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from ._errors import ObjectNotFound, TierError, TierUnavailable

__all__ = ["MIN_PART_SIZE", "S3Store"]

MIN_PART_SIZE = 5 * 1024 * 1024
"""S3's smallest part of a multipart upload (every part but the last)."""

_T = TypeVar("_T")
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_UNAVAILABLE = {
    "NoSuchBucket",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "503",
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "500",
    "RequestTimeout",
    "403",
}


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


class _S3Upload:
    def __init__(self, store: S3Store, key: str) -> None:
        self._store = store
        self._key = key
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._ended = False

    async def write(self, data: bytes) -> None:
        if self._ended:
            raise TierError(f"{self._store.location}/{self._key}: write after the upload ended")
        self._buffer += data
        while len(self._buffer) >= self._store.part_size:
            part = bytes(self._buffer[: self._store.part_size])
            del self._buffer[: self._store.part_size]
            await self._send_part(part)

    async def _send_part(self, part: bytes) -> None:
        s = self._store
        if self._upload_id is None:
            reply = await s._call("create_multipart_upload", self._key, Bucket=s.bucket, Key=self._key)
            self._upload_id = str(reply["UploadId"])
        number = len(self._parts) + 1
        reply = await s._call(
            "upload_part",
            self._key,
            Bucket=s.bucket,
            Key=self._key,
            PartNumber=number,
            UploadId=self._upload_id,
            Body=part,
            ContentMD5=_md5(part),
        )
        self._parts.append({"PartNumber": number, "ETag": reply["ETag"]})

    async def complete(self) -> None:
        if self._ended:
            raise TierError(f"{self._store.location}/{self._key}: the upload already ended")
        s = self._store
        try:
            if self._upload_id is None:
                body = bytes(self._buffer)
                await s._call("put_object", self._key, Bucket=s.bucket, Key=self._key, Body=body, ContentMD5=_md5(body))
            else:
                if self._buffer:
                    await self._send_part(bytes(self._buffer))
                await s._call(
                    "complete_multipart_upload",
                    self._key,
                    Bucket=s.bucket,
                    Key=self._key,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": self._parts},
                )
            self._ended = True
            self._buffer = bytearray()
        except BaseException:
            await self.abort()
            raise

    async def abort(self) -> None:
        self._ended = True
        self._buffer = bytearray()
        if self._upload_id is not None:
            s, upload_id, self._upload_id = self._store, self._upload_id, None
            try:
                with trio.CancelScope(shield=True):
                    await s._call(
                        "abort_multipart_upload", self._key, Bucket=s.bucket, Key=self._key, UploadId=upload_id
                    )
            except TierError:
                pass  # the service expires abandoned uploads; nothing of it is visible (Rule 1)


class S3Store:
    """One bucket of an S3-compatible service (see the module docstring)."""

    def __init__(
        self,
        bucket: str,
        *,
        region: str = "",
        endpoint: str = "",
        credential_id: str = "",
        credential_secret: str = "",
        part_size: int = 64 * 1024 * 1024,
        limiter: trio.CapacityLimiter | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        if not bucket:
            raise ValueError("an S3 offloader needs a bucket (s3ManagedLedgerOffloadBucket)")
        self.bucket = bucket
        self.region = region
        self.endpoint = endpoint
        self.part_size = max(part_size, MIN_PART_SIZE)
        self._credentials = (credential_id, credential_secret)
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._limiter = limiter if limiter is not None else trio.CapacityLimiter(4)
        self._client: Any = None
        self._client_lock = threading.Lock()

    @property
    def location(self) -> str:
        """``s3://bucket`` and the endpoint or region."""
        where = self.endpoint or f"region {self.region or 'us-east-1'}"
        return f"s3://{self.bucket} at {where}"

    def _make_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import boto3  # heavy: loaded on first use, on a worker thread
                from botocore.config import Config

                key_id, secret = self._credentials
                session = boto3.session.Session(
                    aws_access_key_id=key_id or None,
                    aws_secret_access_key=secret or None,
                    region_name=self.region or "us-east-1",
                )
                config = Config(
                    retries={"mode": "standard", "max_attempts": 3},
                    connect_timeout=self._timeouts[0],
                    read_timeout=self._timeouts[1],
                    s3={"addressing_style": "path"},
                    signature_version="s3v4",
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                )
                self._client = session.client("s3", endpoint_url=self.endpoint or None, config=config)
            return self._client

    def _translate(self, op: str, key: str, exc: Exception) -> TierError:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        where = f"{self.location}: {op} {key}"
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", ""))
            message = err.get("Message") or code
            if code in _NOT_FOUND:
                return ObjectNotFound(f"{where}: no such object")
            if code in _UNAVAILABLE:
                return TierUnavailable(f"{where} refused: {code}: {message}")
            return TierError(f"{where} failed: {code}: {message}")
        if isinstance(exc, NoCredentialsError):
            return TierUnavailable(
                f"{where}: no credentials (set s3ManagedLedgerOffloadCredentialId/Secret "
                "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
            )
        if isinstance(exc, BotoCoreError):
            return TierUnavailable(f"{where}: object store unreachable: {exc}")
        return TierError(f"{where} failed: {type(exc).__name__}: {exc}")

    async def _call(self, op: str, key: str, **kwargs: Any) -> Any:
        def call() -> Any:
            return getattr(self._make_client(), op)(**kwargs)

        return await self._run(op, key, call)

    async def _run(self, op: str, key: str, fn: Callable[[], _T]) -> _T:
        try:
            return await trio.to_thread.run_sync(fn, limiter=self._limiter)
        except TierError:
            raise
        except Exception as exc:
            raise self._translate(op, key, exc) from exc

    async def begin_upload(self, key: str) -> _S3Upload:
        """Start writing ``key`` (nothing is sent until a part is full or ``complete``)."""
        return _S3Upload(self, key)

    async def put(self, key: str, data: bytes) -> None:
        """One PUT with its Content-MD5."""
        await self._call("put_object", key, Bucket=self.bucket, Key=key, Body=data, ContentMD5=_md5(data))

    async def get(self, key: str) -> bytes:
        """The whole object."""

        def read() -> bytes:
            body = self._make_client().get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        return await self._run("GET", key, read)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """One ranged GET."""
        if length <= 0:
            return b""

        def read() -> bytes:
            body = self._make_client().get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
            )["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        data = await self._run("GET", key, read)
        if len(data) != length:
            raise TierError(f"{self.location}/{key}: wanted {length} bytes at {start}, got {len(data)}")
        return data

    async def size(self, key: str) -> int:
        """HEAD's Content-Length."""
        reply = await self._call("head_object", key, Bucket=self.bucket, Key=key)
        return int(reply["ContentLength"])

    async def delete(self, key: str) -> bool:
        """DELETE (S3 does not say whether the object existed: a HEAD first tells)."""
        try:
            await self.size(key)
        except ObjectNotFound:
            return False
        await self._call("delete_object", key, Bucket=self.bucket, Key=key)
        return True
