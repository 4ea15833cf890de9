"""Forms, as Scrapy's ``FormRequest`` fills them: ``FormRequest(url, formdata={...})`` and
``FormRequest.from_response(page, formdata={...})`` give a plain :class:`Request` (stored
whole like any other, so a restarted crawl sends the same form again)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from crashsafe.crawl.requests import Request
from crashsafe.errors import ConfigError

if TYPE_CHECKING:
    from crashsafe.crawl.spider import Page

__all__ = ["FormRequest"]

FORM_TYPE = "application/x-www-form-urlencoded"
_NOT_SENT = {"submit", "image", "reset", "button", "file"}
FormData = Mapping[str, str | Iterable[str] | None] | Iterable[tuple[str, str]]


def _pairs(formdata: FormData | None) -> list[tuple[str, str | None]]:
    if formdata is None:
        return []
    items = formdata.items() if isinstance(formdata, Mapping) else formdata
    pairs: list[tuple[str, str | None]] = []
    for name, value in items:
        if value is None or isinstance(value, str):
            pairs.append((str(name), value))
        else:
            pairs.extend((str(name), str(v)) for v in value)
    return pairs


def _request(url: str, method: str, fields: list[tuple[str, str]], **kw: Any) -> Request:
    encoded = urlencode(fields)
    if method == "GET":
        parts = urlsplit(url)
        query = f"{parts.query}&{encoded}" if parts.query and encoded else parts.query or encoded
        return Request(urlunsplit(parts._replace(query=query, fragment="")), **kw)
    headers = {"Content-Type": FORM_TYPE, **dict(kw.pop("headers", None) or {})}
    return Request(url, method=method, body=encoded, headers=headers, **kw)


class FormRequest:
    """Scrapy's FormRequest: what it makes is a :class:`Request` (POST by default, the
    fields urlencoded in the body; GET: in the query)."""

    def __new__(  # type: ignore[misc]
        cls, url: str, *, formdata: FormData | None = None, method: str = "POST", **kw: Any
    ) -> Request:
        fields = [(n, v) for n, v in _pairs(formdata) if v is not None]
        return _request(url, method.upper(), fields, **kw)

    @classmethod
    def from_response(
        cls,
        response: Page,
        *,
        formdata: FormData | None = None,
        formname: str | None = None,
        formid: str | None = None,
        formnumber: int = 0,
        formxpath: str | None = None,
        formcss: str | None = None,
        clickdata: Mapping[str, str] | None = None,
        dont_click: bool = False,
        method: str | None = None,
        **kw: Any,
    ) -> Request:
        """The request a browser sends when the page's form is submitted: its fields
        (inputs, checked boxes, selected options, textareas), the first submit button's
        name and value (unless ``dont_click``; ``clickdata`` chooses another), then
        ``formdata`` over them (a value None drops a field). The form is the one named
        ``formname``, of id ``formid``, matched by ``formxpath``/``formcss``, or the
        ``formnumber``-th (0: the first)."""
        form = _find_form(response, formname, formid, formnumber, formxpath, formcss)
        fields = _fields(form)
        if not dont_click:
            click = _clickable(form, clickdata)
            if click is not None:
                fields.append(click)
        given = _pairs(formdata)
        names = {n for n, _ in given}
        fields = [(n, v) for n, v in fields if n not in names]
        fields += [(n, v) for n, v in given if v is not None]
        action = form.get("action") or response.url
        verb = (method or form.get("method") or "GET").upper()
        return _request(response.urljoin(action.strip()), verb, fields, **kw)


def _find_form(
    page: Page,
    name: str | None,
    form_id: str | None,
    number: int,
    xpath: str | None,
    css: str | None,
) -> Any:
    forms = page.xpath("//form")
    if not forms:
        raise ConfigError(f"no <form> on {page.url}")
    if name is not None:
        found = page.xpath("//form[@name=$n]", n=name)
    elif form_id is not None:
        found = page.xpath("//form[@id=$i]", i=form_id)
    elif xpath is not None or css is not None:
        chosen = page.xpath(xpath) if xpath is not None else page.css(css or "")
        found = chosen.xpath("ancestor-or-self::form")
    else:
        if not 0 <= number < len(forms):
            raise ConfigError(f"formnumber {number}: {page.url} has {len(forms)} form(s)")
        return forms[number].root
    if not found:
        raise ConfigError(f"no form on {page.url} matches what was asked for")
    return found[-1].root if xpath is not None or css is not None else found[0].root


def _fields(form: Any) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    for element in form.iter("input", "select", "textarea"):
        name = element.get("name")
        if not name or element.get("disabled") is not None:
            continue
        if element.tag == "select":
            chosen = element.xpath(".//option[@selected]") or (
                [] if element.get("multiple") is not None else element.xpath(".//option")[:1]
            )
            fields += [(name, o.get("value", o.text or "").strip()) for o in chosen]
        elif element.tag == "textarea":
            fields.append((name, element.text or ""))
        else:
            kind = (element.get("type") or "text").lower()
            if kind in _NOT_SENT:
                continue
            if kind in ("checkbox", "radio") and element.get("checked") is None:
                continue
            default = "on" if kind in ("checkbox", "radio") else ""
            fields.append((name, element.get("value", default)))
    return fields


def _clickable(form: Any, clickdata: Mapping[str, str] | None) -> tuple[str, str] | None:
    buttons = [
        e
        for e in form.iter("input", "button")
        if (e.get("type") or ("submit" if e.tag == "button" else "text")).lower()
        in ("submit", "image")
    ]
    if clickdata:
        buttons = [b for b in buttons if all(b.get(k) == v for k, v in clickdata.items())]
        if not buttons:
            raise ConfigError(f"no submit button matches clickdata {dict(clickdata)}")
    for button in buttons:
        name = button.get("name")
        if name:
            return name, button.get("value", "")
    return None
