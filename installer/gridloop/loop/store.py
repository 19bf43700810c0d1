"""The loop's objects in the object store (a thin shell over boto3).

Trajectories are JSON lines under ``s3://BUCKET/<run>/...`` (trajectories.object_key);
the bucket must exist (``gridloop local up`` makes ``loop`` beside ``models``), and one that
does not is refused with its name before anything runs. Endpoint and keys are boto3's
usual ones (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...; ``gridloop local env`` sets them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gridloop.loop.agent import LoopError
from gridloop.loop.trajectories import Attempt, parse_lines
from gridloop.models import pushing


@dataclass
class Store:
    bucket: str
    endpoint: str | None = None

    def __post_init__(self) -> None:
        self._s3 = pushing.client(self.endpoint)

    def check_bucket(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        where = self.endpoint or "the default endpoint"
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket"):
                raise LoopError(f"bucket: {self.bucket!r} does not exist at {where}") from None
            raise LoopError(f"bucket: {self.bucket!r} at {where}: {code or err}") from None
        except BotoCoreError as err:
            raise LoopError(f"bucket: {self.bucket!r} at {where}: {err}") from None

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put_attempts(self, key: str, attempts: list[Attempt]) -> str:
        body = "".join(a.line() + "\n" for a in attempts).encode()
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        return self.uri(key)

    def put_json(self, key: str, value: Any) -> str:
        body = (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        return self.uri(key)

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as err:
            if str(err.response.get("Error", {}).get("Code", "")) in ("404", "NoSuchKey"):
                return False
            raise
        return True

    def get_json(self, key: str) -> Any:
        return json.loads(self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def keys(self, prefix: str) -> list[str]:
        out: list[str] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            out += [item["Key"] for item in page.get("Contents", [])]
        return sorted(out)

    def read_attempts(self, prefix: str) -> list[dict[str, Any]]:
        """Every attempt stored under `prefix` (its *.jsonl objects)."""
        records: list[dict[str, Any]] = []
        for key in self.keys(prefix):
            if key.endswith(".jsonl"):
                text = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()
                records += parse_lines(text, self.uri(key))
        return records
