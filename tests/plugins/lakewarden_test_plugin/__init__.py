"""A third-party plugin package: registered through its own entry points (see the dist-info
folder beside it), discovered by Lakewarden like any installed plugin."""

from __future__ import annotations

import datetime as dt
import time

from processes.maintenance.schemas import MIN_BENEFIT, MIN_BENEFIT_SCHEMA
from processes.plugin import Estimate, ProcessFactory, TableProcess, TriggerStrategy, register_action

TOUCH = register_action("touch", "Write a marker file in staging (test plugin)")


class TouchProcess(TableProcess):
    """Works for ``seconds``, checking for cancel, then succeeds or raises when ``fail`` is set;
    with ``disk-full`` its marker goes to /dev/full, where every write fails with ENOSPC."""

    def run(self, context):
        steps = max(1, int(self.params.get("seconds", 0) * 10))
        context.staging_dir.mkdir(parents=True, exist_ok=True)
        marker = "/dev/full" if self.params.get("disk-full") else context.staging_dir / "marker"
        with open(marker, "w") as staged:
            staged.write("staged")
        for step in range(steps):
            context.check_cancelled()
            context.report_progress(step + 1, steps, f"step {step + 1} of {steps}")
            if self.params.get("seconds"):
                time.sleep(0.1)
        if self.params.get("fail"):
            raise RuntimeError("asked to fail")
        context.checkpoint("before-commit")
        return {"steps": steps, "table_files": context.table.summary().file_count}


class TouchFactory(ProcessFactory):
    name = "test-touch"
    description = "Touches Delta tables that have at least min-files files"
    properties_schema = {
        "type": "object",
        "properties": {
            "min-files": {"type": "integer", "minimum": 0},
            "interval": {"type": "integer", "minimum": 1},
            "parallelism": {"type": "integer", "minimum": 1},
            "on-new-snapshot": {"type": "boolean"},
            MIN_BENEFIT: MIN_BENEFIT_SCHEMA,
        },
        "additionalProperties": False,
    }
    default_properties = {"min-files": 0, "interval": 3600, "parallelism": 2, "on-new-snapshot": False}
    params_schema = {
        "type": "object",
        "properties": {
            "seconds": {"type": "number", "minimum": 0, "maximum": 600},
            "fail": {"type": "boolean"},
            "disk-full": {"type": "boolean"},
        },
        "additionalProperties": False,
    }

    def supported_actions(self):
        return {"delta": {TOUCH}}

    def trigger_strategy(self, format, action):
        return TriggerStrategy(
            interval=dt.timedelta(seconds=self.properties["interval"]),
            on_new_snapshot=self.properties["on-new-snapshot"],
            parallelism=self.properties["parallelism"],
        )

    def trigger(self, runtime, action):
        if runtime.table.file_count < runtime.config["min-files"]:
            return None
        return TouchProcess(action, {"seconds": 0})

    def recover(self, runtime, record):
        return TouchProcess(record.action, record.params)

    def estimate(self, table, action):
        """As a compaction would: each small file but one removed, its bytes read and written."""
        return Estimate(
            small_files_removed=max(0, table.small_file_count - 1),
            bytes_read=table.total_bytes,
            bytes_written=table.total_bytes,
        )


class TouchTwinFactory(TouchFactory):
    """Claims the same pair as TouchFactory: enabling both must be refused."""

    name = "test-touch-twin"
    enabled_by_default = False
