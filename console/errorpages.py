from __future__ import annotations

from django.shortcuts import render


def not_found(request, exception=None):
    return render(request, "404.html", {"path": request.path}, status=404)


def server_error(request):
    return render(request, "500.html", status=500)
