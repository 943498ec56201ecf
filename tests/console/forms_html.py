"""Reading a generated form's controls out of a page (the forms of issue 34)."""

from __future__ import annotations

from html.parser import HTMLParser


class Controls(HTMLParser):
    """The attributes of each input and select (by name, by id for unnamed ones), and the
    selected option of each select."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: dict[str, dict[str, str | None]] = {}
        self.selected: dict[str, str] = {}
        self.options: dict[str, list[str]] = {}
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        key = attributes.get("name") or attributes.get("id") or ""
        if tag in ("input", "select", "textarea"):
            self.controls[key] = {"tag": tag, **attributes}
        if tag == "select":
            self._select = key
            self.options[key] = []
        if tag == "option" and self._select is not None:
            self.options[self._select].append(attributes.get("value") or "")
            if "selected" in attributes:
                self.selected[self._select] = attributes.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def controls(html: str) -> Controls:
    parser = Controls()
    parser.feed(html)
    return parser
