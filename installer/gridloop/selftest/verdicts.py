"""Whether a self-test check passed, and the one line that says so (pure).

A check passes only on the answer that proves the thing: the health service's
`/healthz` saying its loop is alive, its `/metrics` carrying a metric only it exports
(any other server answering 200 on the port is not it), a refusal that names the
policy by the API server's own words (`ValidatingAdmissionPolicy '<name>'`): RBAC,
Pod Security or another policy refuse with other words, and a 403 alone proves
nothing. A compliant object must be admitted, or the refusals prove nothing either.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridloop.selftest.probes import Expect, Probe

# A gauge every health service replica exports from its start, leader or not
# (gridloop.health.metrics): its sample on /metrics means the answer is the service's.
HEALTH_METRIC = "gridloop_health_leader"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    line: str  # one line, starting "ok: " or "FAIL: "


def _ok(line: str) -> Verdict:
    return Verdict(True, f"ok: {line}")


def _fail(line: str) -> Verdict:
    return Verdict(False, f"FAIL: {' '.join(line.split())}")


@dataclass(frozen=True)
class HttpAnswer:
    status: int  # the HTTP status; 0 when nothing answered
    body: str = ""
    error: str = ""  # why nothing answered (refused, timed out, no such host)


def _no_answer(url: str, answer: HttpAnswer) -> Verdict:
    return _fail(f"no answer from {url}: {answer.error or 'no HTTP response'}")


def healthz(url: str, answer: HttpAnswer) -> Verdict:
    """`/healthz`: 200 while the service's loop goes round, 503 once it is stuck."""
    if answer.status == 0:
        return _no_answer(url, answer)
    if answer.status == 200:
        return _ok(f"{url} answered 200: the health service's loop is alive")
    return _fail(f"{url} answered {answer.status}: {answer.body.strip() or '(empty body)'}")


def has_sample(text: str, metric: str) -> bool:
    """Whether Prometheus' text format `text` has a sample (not only a comment) of `metric`."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name == metric:
            return True
    return False


def metrics(url: str, answer: HttpAnswer, metric: str = HEALTH_METRIC) -> Verdict:
    """`/metrics`: 200 with a sample of `metric`, which only the health service exports."""
    if answer.status == 0:
        return _no_answer(url, answer)
    if answer.status != 200:
        return _fail(f"{url} answered {answer.status}: {answer.body.strip() or '(empty body)'}")
    if not has_sample(answer.body, metric):
        return _fail(
            f"{url} answered 200 but without {metric}: what answers there is not "
            "gridloop's health service"
        )
    return _ok(f"{url} answered 200 with {metric}")


@dataclass(frozen=True)
class ApiAnswer:
    status: int  # the HTTP status; 0 when the API server did not answer
    message: str = ""  # a refusal's Status message, or why nothing answered
    warnings: str = ""  # the answer's Warning headers, as one string


def policy_mark(policy: str) -> str:
    """How the API server names a policy in its refusals and warnings."""
    return f"ValidatingAdmissionPolicy '{policy}'"


def _refused(status: int) -> bool:
    return status in (403, 422)  # a policy's reason Forbidden is 403, Invalid 422


def _admitted(status: int) -> bool:
    return 200 <= status < 300


def _why_else(answer: ApiAnswer) -> str:
    if "cannot create resource" in answer.message:
        return " (RBAC: the test's Role does not grant this)"
    return ""


def admission(probe: Probe, answer: ApiAnswer) -> Verdict:
    """Whether the API server did with `probe` what its policy must make it do."""
    mark = policy_mark(probe.policy)
    what = f"{probe.what} in namespace {probe.namespace}"
    if answer.status == 0:
        return _fail(f"{what}: no answer from the API server: {answer.message}")
    named = mark in answer.message
    warned = mark in answer.warnings
    other = (
        f"{what} was refused (HTTP {answer.status}), but not by {probe.policy}{_why_else(answer)}"
    )
    if probe.expect is Expect.ALLOW:
        if _admitted(answer.status) and not warned:
            return _ok(f"{what} was admitted (dry run): {probe.policy} lets it through")
        if _admitted(answer.status):
            return _fail(f"{what} must pass {probe.policy}, which warned: {answer.warnings}")
        return _fail(
            f"{what} must be admitted but was refused (HTTP {answer.status}): "
            f"{answer.message}: while compliant objects are refused too, the refusals "
            "prove nothing about the policy"
        )
    if probe.expect is Expect.DENY:
        if _refused(answer.status) and named:
            return _ok(f"{what} was refused by {probe.policy}")
        if _admitted(answer.status):
            only = "it only warned: its binding has no Deny" if warned else "it is not in force"
            return _fail(
                f"{what} was admitted, though {probe.policy} must refuse it: {only} "
                f"(kubectl get validatingadmissionpolicybinding {probe.policy} -o yaml)"
            )
        return _fail(f"{other}: {answer.message}")
    # Expect.WARN: the binding's validationActions are Warn (and Audit), not Deny
    if _admitted(answer.status) and warned:
        return _ok(f"{what} was admitted with {probe.policy}'s warning (validationActions Warn)")
    if _admitted(answer.status):
        return _fail(
            f"{what} was admitted without a warning from {probe.policy}: it is not in force "
            f"(kubectl get validatingadmissionpolicybinding {probe.policy} -o yaml)"
        )
    if _refused(answer.status) and named:
        return _fail(f"{what} was refused by {probe.policy}, whose binding should only warn")
    return _fail(f"{other}: {answer.message}")


def worth_retrying(probe: Probe, answer: ApiAnswer) -> bool:
    """Whether another try could change the verdict: the API server did not answer or
    was busy, or a policy that must act did not (one just installed takes a moment to
    load). A refusal for another reason is the answer."""
    if admission(probe, answer).ok:
        return False
    if answer.status == 0 or answer.status == 429 or answer.status >= 500:
        return True
    return probe.expect is not Expect.ALLOW and _admitted(answer.status)


def http_worth_retrying(answer: HttpAnswer) -> bool:
    """Nothing answered, or the service said it is not there yet."""
    return answer.status == 0 or answer.status >= 500
