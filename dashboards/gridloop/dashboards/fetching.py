"""Ask a Prometheus for a dashboard's data over its HTTP API (``/api/v1/query_range``).

A thin shell for ``gridloop dashboards preview``: one GET per query, JSON back. A URL that
is not http(s), a server that does not answer, or an answer that is not Prometheus' is
one ``UsageError`` naming ``--prometheus-url``; a query Prometheus refuses is one naming
the panel.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from gridloop.errors import UsageError

TIMEOUT_S = 20


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


def check_url(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"--prometheus-url {url}: not an http(s) URL (e.g. http://127.0.0.1:9090)")
    return url.rstrip("/")


def _get(url: str, path: str, params: dict[str, str]) -> Any:
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(full, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        try:
            return json.loads(err.read())
        except ValueError:
            raise UsageError(f"--prometheus-url {url}: HTTP {err.code} from {path}") from err
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise UsageError(f"--prometheus-url {url}: cannot reach Prometheus: {reason}") from err
    except ValueError as err:
        raise UsageError(f"--prometheus-url {url}: the answer is not Prometheus' JSON") from err


def query_range(
    url: str, expr: str, start: float, end: float, step: float, what: str
) -> list[Series]:
    """The series ``expr`` returns between ``start`` and ``end``."""
    answer = _get(
        url,
        "/api/v1/query_range",
        {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
    )
    if not isinstance(answer, dict) or "status" not in answer:
        raise UsageError(f"--prometheus-url {url}: the answer is not Prometheus' JSON")
    if answer["status"] != "success":
        raise UsageError(f"{what}: Prometheus refused the query: {answer.get('error', '?')}")
    out = []
    for r in answer["data"]["result"]:
        pairs = [(float(t), float(v)) for t, v in r["values"]]
        out.append(Series(r["metric"], [t for t, _ in pairs], [v for _, v in pairs]))
    return out
