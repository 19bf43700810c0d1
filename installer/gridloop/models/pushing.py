"""`gridloop models push DIR s3://BUCKET/PREFIX/`: upload a model folder (a thin shell
over boto3).

The endpoint and keys are boto3's usual ones: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY (`eval "$(gridloop local env)"` sets them for the local cluster's
object store), or `--endpoint`. Large files go up in parallel multipart parts (boto3's
transfer manager). The folder must look like a Hugging Face checkpoint (a config.json and
at least one *.safetensors file): the Run:ai streamer loads safetensors only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from gridloop.errors import UsageError
from gridloop.models.uris import S3Uri

PART_BYTES = 64 * 2**20
KEYS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for the local cluster: "
    'eval "$(gridloop local env)"'
)


@dataclass(frozen=True)
class Pushed:
    uri: S3Uri
    files: int
    nbytes: int
    seconds: float


def model_files(folder: Path) -> list[Path]:
    """The files to upload; refuses a folder that is not a safetensors checkpoint."""
    if not folder.is_dir():
        raise UsageError(f"DIR: {folder} is not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    names = {p.name for p in files}
    if "config.json" not in names:
        raise UsageError(f"DIR: {folder} has no config.json (not a Hugging Face checkpoint)")
    if not any(n.endswith(".safetensors") for n in names):
        raise UsageError(
            f"DIR: {folder} has no *.safetensors file; the Run:ai streamer loads safetensors only"
        )
    return files


def client(endpoint: str | None):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3})
    # a session of its own: boto3's default one keeps the first keys it read for good
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)


def push(folder: Path, uri: S3Uri, endpoint: str | None, concurrency: int = 8) -> Pushed:
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    files = model_files(folder)
    s3 = client(endpoint)
    where = endpoint or "AWS's default endpoint"
    transfer = TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=concurrency
    )
    t0 = time.monotonic()
    try:
        s3.head_bucket(Bucket=uri.bucket)
        for path in files:
            s3.upload_file(str(path), uri.bucket, uri.key(path.name), Config=transfer)
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket"):
            raise UsageError(f"URI: the bucket {uri.bucket!r} does not exist at {where}") from err
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise UsageError(
                f"pushing to {uri}: {code}: the keys are refused ({KEYS_HINT})"
            ) from err
        raise UsageError(f"pushing to {uri}: {code or err}") from err
    except NoCredentialsError as err:
        raise UsageError(f"pushing to {uri}: no S3 keys ({KEYS_HINT})") from err
    except BotoCoreError as err:
        raise UsageError(f"pushing to {uri} at {where}: {err}") from err
    return Pushed(uri, len(files), sum(p.stat().st_size for p in files), time.monotonic() - t0)
