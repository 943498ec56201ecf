"""What every API view shares: authentication (token first, so an anonymous request gets 401 with
``WWW-Authenticate: Token``), the parsers (console/api/parsers.py) and the router's root view."""

from __future__ import annotations

from rest_framework import parsers, routers
from rest_framework.authentication import SessionAuthentication, TokenAuthentication

from console.api.parsers import JSONParser

AUTHENTICATION_CLASSES = [TokenAuthentication, SessionAuthentication]
PARSER_CLASSES = [JSONParser, parsers.FormParser, parsers.MultiPartParser]


# Mixed in first by every API view; these hold whatever REST_FRAMEWORK's defaults in the settings say.
# (No docstring: drf-spectacular would take it as the description of every operation.)
class ApiDefaults:
    authentication_classes = AUTHENTICATION_CLASSES
    parser_classes = PARSER_CLASSES


class ApiRootView(ApiDefaults, routers.APIRootView):
    pass


class ApiRouter(routers.DefaultRouter):
    APIRootView = ApiRootView
