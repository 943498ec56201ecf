from django.apps import AppConfig


class ProcessesConfig(AppConfig):
    name = "processes"
    verbose_name = "Table processes"

    def ready(self) -> None:
        from processes.health import connect_health_signals

        connect_health_signals()
