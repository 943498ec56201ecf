"""Every maintenance decision explained (issue 31 item 3): what the scheduler decided for each due
(table, action) and why, kept as a bounded history (``models.Decision``), recorded in one flush per
tick (``log``), read back for the Maintenance tab and the API (``selectors``).

Recording from scheduler code: ``record(table_id, action, DecisionKind.X, "why", group=...,
numbers={...})``."""

from processes.decisions.log import KEEP, DecisionLog, record, recording
from processes.decisions.models import Decision, DecisionKind

__all__ = ["KEEP", "Decision", "DecisionKind", "DecisionLog", "record", "recording"]
