"""Lakewarden plugin for Apache Paimon tables (read through ``pypaimon``)."""

from lakewarden_paimon.adapter import PaimonAdapter
from lakewarden_paimon.table import PaimonFormat, PaimonSpecTable

__all__ = ["PaimonAdapter", "PaimonFormat", "PaimonSpecTable"]
