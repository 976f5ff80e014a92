"""What autotune is given as a secret, and how a text, an argv or an environment is cleared of it.

The secrets: the password in a URL's userinfo (``prometheus.url``, the storage URL, an argument
of ``target.local.command``) or in its query (``password=``, ``sslpassword=``, ``token=``...),
the Prometheus bearer token (``token_env``, ``token_file``), header values
(``prometheus.headers``, ``target.local.load.headers``) and a load's body. Nothing autotune
writes (a log line, a message, a record, a report) may hold one, nor any argv (every user can read
it in /proc) or environment it gives a child.

The rules err on the side of hiding, and need no URL to parse: a URL (or what was meant to be one:
``postgresql//...``, no scheme at all) loses everything between the first ``:`` after its scheme
and its last ``@``; ``scrub`` also replaces each known secret wherever it appears, so a library's
message that quotes a piece of a value we never showed whole is cleared too. A known secret
shorter than ``MIN_SCRUBBED`` characters is not searched for (replacing every ``a`` would garble
the message and hide nothing worth hiding).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

MASK = "***"
MIN_SCRUBBED = 4

_SECRET_NAME = (r"(?:ssl)?pass(?:word|wd|phrase)?|pwd|pw|secret|token|jwt|cookie|creds|"
                r"(?:api|access|private|secret)?[-_]?key|bearer|dsn|credentials?|auth\w*")
_QUERY_SECRET = re.compile(
    rf"(?i)([?&;](?:[\w.-]*[-_.])?(?:{_SECRET_NAME})=)[^&;#\s'\"]*")
"""A query parameter whose name says it holds a secret (libpq takes ``password`` and
``sslpassword`` there; APIs take ``token``, ``access_token``, ``api_key``...)."""
_SCHEME = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*(?::/{1,2}|//)|//)")
"""``scheme://``, and the malformed ``scheme:/``, ``scheme//`` and ``//``; never ``user:``."""
_URL_LIKE = re.compile(r"[^\s'\"()<>,;]*@[^\s'\"()<>,;]*")
"""In a message: a word with an ``@`` (where userinfo may be)."""
_SECRET_FLAG = re.compile(
    rf"(?i)^-{{1,2}}(?:[A-Za-z0-9]+[-_.])*(?:{_SECRET_NAME})(?:[-_.][\w.-]*)?$")
"""A flag one of whose ``-``/``_``/``.``-separated words names a secret: ``--password``,
``--secret-key``, ``--db.password-file``; not ``--monkey`` (``-H`` values: ``_INLINE_SECRET``)."""
_AUTHORIZATION = re.compile(r"(?i)(\b(?:proxy-)?authorization\s*:\s*).*")
"""Inside any argument: a header line ``Authorization: Bearer t`` (all of its value)."""
_INLINE_SECRET = re.compile(rf"(?i)(\b(?:{_SECRET_NAME})\b\s*[=:]\s*)[^\s&;,]+")
"""Inside any argument: ``password=p`` (a libpq DSN), ``token: t``."""
_SECRET_ASSIGNMENT = re.compile(
    rf"(?i)^(-{{0,2}}(?:[\w.-]*[-_.])?(?:{_SECRET_NAME})=)(.+)$")

SAFE_HEADERS = frozenset({"content-type", "content-encoding", "content-language", "accept",
                          "accept-encoding", "accept-language"})
"""Headers whose values say what is sent, not who sends it: kept in descriptions."""

TOOL_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG",
                            "LANGUAGE", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG",
                            "GOTRACEBACK"})
"""The environment autotune's own tools (the load generator) get, with ``LC_*``."""
OWN_PREFIX = "AUTOTUNE_"


def _password_span(text: str) -> tuple[int, int] | None:
    """Where a URL's password is: after the first ``:`` past the scheme, up to the last ``@``
    (None: no ``@``, or a user without a password)."""
    at = text.rfind("@")
    prefix = _SCHEME.match(text)
    colon = text.find(":", prefix.end() if prefix else 0, at) if at >= 0 else -1
    return (colon + 1, at) if colon >= 0 else None


def url(text: str) -> str:
    """``text`` (a URL, or what was meant to be one) without the password of its userinfo
    (``user:***@host``) and without secret query parameters (``?password=***``)."""
    text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
    span = _password_span(text)
    return text if span is None else f"{text[:span[0]]}{MASK}{text[span[1]:]}"


def password(text: str) -> str | None:
    """The password of a URL's userinfo where ``url`` finds it (perhaps percent-encoded), or
    None."""
    text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
    span = _password_span(text)
    return None if span is None else text[span[0]:span[1]]


def secrets_of(text: str) -> list[str]:
    """The secrets written in a URL: its password, and the values of secret query parameters.
    With the pieces of the password between '@', ':' and '/': a parser that cuts it elsewhere
    than ``url`` does quotes them as a host or a port."""
    found = [m.group(0).split("=", 1)[1] for m in _QUERY_SECRET.finditer(text)]
    secret = password(text)
    if secret:
        found += [secret, *re.split(r"[@:/]", secret)]
    return found


def split_userinfo(text: str) -> tuple[str, tuple[str, str] | None]:
    """A URL without its userinfo, and the (user, password) it held, percent-decoded; for HTTP
    basic auth, so that no URL with a password exists past the configuration."""
    prefix = _SCHEME.match(text)
    start = prefix.end() if prefix else 0
    # The authority ends at the first '/', '?' or '#' (in a password they are percent-encoded).
    end = min([i for i in (text.find(c, start) for c in "/?#") if i >= 0], default=len(text))
    at = text.rfind("@", start, end)
    if at < 0:
        return text, None
    user, _, secret = text[start:at].partition(":")
    return text[:start] + text[at + 1:], (unquote(user), unquote(secret))


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` (a message, a log line) with every URL's credentials masked and every known
    secret (also percent-encoded or decoded) replaced by ``***``."""
    text = _URL_LIKE.sub(lambda m: url(m.group(0)), text)
    text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
    forms = {form for s in secrets if s
             for form in (s, unquote(s), quote(s, safe=""), repr(s)[1:-1], s.strip())}
    for form in sorted(forms, key=len, reverse=True):
        if len(form) >= MIN_SCRUBBED:
            text = text.replace(form, MASK)
    return text


def output(text: str) -> str:
    """A child's own words (a service's, Prometheus's last lines, quoted when it fails), which
    autotune shows and records but never wrote: ``scrub`` plus what a program prints about
    its configuration, ``password=p``, ``token: t``, ``Authorization: Bearer t`` (their whole
    value). Stricter than ``scrub``, whose messages are autotune's own and name keys."""
    # Line by line: an Authorization header's value ends with its line.
    return "\n".join(_inline(line) for line in scrub(text).split("\n"))


def argv(args: Sequence[str]) -> list[str]:
    """An argv fit for a description: the program and every argument, but with the credentials
    in URLs masked, and the value of an argument named like a secret (``--password x``,
    ``--api-key=x``, ``DB_PASSWORD=x``)."""
    out: list[str] = []
    hide_next = False
    for i, arg in enumerate(args):
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        assignment = _SECRET_ASSIGNMENT.match(arg)
        if i > 0 and assignment:
            out.append(assignment.group(1) + MASK)
            continue
        out.append(_inline(url(arg)) if i > 0 else arg)
        hide_next = i > 0 and _SECRET_FLAG.match(arg) is not None
    return out


def _inline(arg: str) -> str:
    # Both: a shell line may hold a header and a password= before it.
    return _INLINE_SECRET.sub(rf"\1{MASK}", _AUTHORIZATION.sub(rf"\1{MASK}", arg))


def headers(values: Mapping[str, str]) -> dict[str, str]:
    """Header names, with the values of ``SAFE_HEADERS`` only."""
    return {k: v if k.lower() in SAFE_HEADERS else MASK for k, v in values.items()}


def body(text: str) -> str:
    """A request body as its size: it may carry credentials (a login form)."""
    return f"<{len(text.encode())} bytes>" if text else ""


def load_spec(dump: Mapping[str, Any]) -> dict[str, Any]:
    """A load spec's dump (local or in-cluster) fit to record: header names, the body's size,
    URLs and paths without their secrets; the keys it lacks stay absent."""
    out = dict(dump)
    if isinstance(out.get("headers"), Mapping):
        out["headers"] = headers(out["headers"])
    if isinstance(out.get("body"), str):
        out["body"] = body(out["body"])
    for key in ("path", "url"):
        if isinstance(out.get(key), str):
            out[key] = url(out[key])
    return out


LIBPQ_SECRETS = frozenset({"PGPASSWORD"})
"""libpq reads the storage's password from PGPASSWORD when its URL has none (a CronJob's Secret
often sets it so): autotune's secret, never the service's. A service that needs one of its own
gets it from ``target.local.env``."""


def child_env(secret_variables: Iterable[str | None] = (),
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process the user asked for (the service under test): ours
    (``base``, default ``os.environ``) without autotune's own variables (``AUTOTUNE_*``: the
    storage URL...), without ``secret_variables`` (the variable ``prometheus.token_env``
    names) and without ``LIBPQ_SECRETS``. The user's service keeps whatever else it may need
    (PATH, HOME, its own credentials)."""
    base = os.environ if base is None else base
    hidden = {v for v in secret_variables if v} | LIBPQ_SECRETS
    return {k: v for k, v in base.items() if not k.startswith(OWN_PREFIX) and k not in hidden}


def tool_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of one of autotune's own tools (the load generator): only
    ``TOOL_VARIABLES`` and the locale (``LC_*``) of ``base`` (default ``os.environ``)."""
    base = os.environ if base is None else base
    return {k: v for k, v in base.items() if k in TOOL_VARIABLES or k.startswith("LC_")}


class ScrubbingFormatter(logging.Formatter):
    """Every log line, its traceback included, through ``scrub``: a library's exception that
    quotes a URL with its password (a bug's traceback, a driver's message) is masked on its way
    out, whichever code logged it."""

    def format(self, record: logging.LogRecord) -> str:
        return _AUTHORIZATION.sub(rf"\1{MASK}", scrub(super().format(record)))
