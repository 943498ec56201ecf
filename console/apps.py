import os

from django.apps import AppConfig
from django.conf import settings


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Lakewarden console"

    def ready(self) -> None:
        # prometheus-client chooses its multiprocess mode (request-latency samples of every web
        # process, console/metrics/http.py) from this variable when it is first imported, which no
        # module of an installed app does before this runs. The folder is made on first use.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = settings.PROMETHEUS_MULTIPROC_DIR
