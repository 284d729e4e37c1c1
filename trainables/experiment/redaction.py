"""Secrets stay out of records: a `--notify` URL carries its service's password or token (`json://user:pw@host/`,
`slack://TokenA/TokenB/TokenC`, `mailto://user:pw@host`), and a sweep records and prints its command line
(`raysweep.json`'s `argv`, `provenance/`'s `command`, the report, the continue line). Each of them keeps the
URL's scheme and host only; the sweep itself sends to the URL as given, from memory.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

REDACTED_FLAGS = ("--notify",)  # flags whose value is a URL with a secret in it


def redact_url(url: str) -> str:
    """`scheme://host` of `url` (`json://user:pw@example.com:8080/p?token=x` -> `json://example.com`): no user,
    password, port, path, query or fragment. A "host" that names no machine (no dot, not `localhost`, no IP
    address: Slack's first token, an ntfy topic) is `<redacted>` too, as is a value that is no `scheme://` URL."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:  # a malformed port or IPv6 literal
        return "<redacted>"
    if not parts.scheme or "://" not in url:
        return "<redacted>"
    return f"{parts.scheme}://{host if _names_a_machine(host) else '<redacted>'}"


def _names_a_machine(host: str) -> bool:
    """Whether `host` is a domain name (`hooks.example.com`), `localhost` or an IP address."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host == "localhost" or ("." in host and not host.startswith("."))


def redacted_argv(argv: list[str]) -> list[str]:
    """`argv` with the value of each `REDACTED_FLAGS` flag (`--notify URL`, `--notify=URL`) before a `--`
    passed through `redact_url`; a command's own words after `--` stay as they are."""
    end = argv.index("--") if "--" in argv else len(argv)
    out = list(argv)
    for i, word in enumerate(argv[:end]):
        flag, eq, value = word.partition("=")
        if flag in REDACTED_FLAGS and eq:
            out[i] = f"{flag}={redact_url(value)}"
        elif i > 0 and argv[i - 1] in REDACTED_FLAGS:
            out[i] = redact_url(word)
    return out
