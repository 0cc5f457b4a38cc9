"""Operations: finding out how a real server behaves (`probe`), writing a config from that (`init`), and
checking a deployment (`doctor`). Sits above `etl.dataset` and `etl.pipeline`, below `etl.cli`.

probe.py     polite, bounded probes of an instance, shared by `etl init` and `etl doctor`
init.py      the findings of a probe as a commented YAML config ready for `etl run`
doctor/      the checks of a deployment, each a small function returning findings
findings.py  Finding: one thing a check found, rendered as one line or as JSON
"""

from etl.ops.findings import Finding, Status

__all__ = ["Finding", "Status"]
