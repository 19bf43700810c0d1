"""`gridloop selftest health|policies`: what the chart's `helm test` hooks run.

The hooks (charts/gridloop/templates/tests/) run this in gridloop's own image, which
has the wheel's base dependencies only: nothing here may import more than the
Kubernetes client and the standard library.

`probes` builds the objects the policy test submits (pure data); `verdicts` decides,
from an HTTP or API answer, whether a check passed and the one line that says so
(pure); `probing` does the requests, with bounded retries; `selftest_command` parses
the flags, prints a line per check and sets the exit code. Every object is submitted
as a server-side dry run (`dryRun=All`): the test never creates anything.
"""
