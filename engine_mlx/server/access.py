"""Which web pages and host names may reach the server: the Host and Origin checks.

Why: a server on 127.0.0.1 is still reachable from any web page the user opens. A page can
POST to it directly (a "simple" request needs no CORS preflight), or use DNS rebinding (its own
name, re-pointed at 127.0.0.1) to read the replies too — the hole Ollama closed after
CVE-2024-28224. Browsers always send ``Host`` and, on such requests, ``Origin``, which a page
cannot forge, so the server answers only for Host names it is known by and for pages that are
local or allowed by name. Clients that are not browsers (curl, the ``openai`` library) send no
``Origin`` and pass.

Allowed Hosts: the bound address, ``localhost``, ``127.0.0.1``, ``[::1]`` (any port), any IP
literal when bound to every interface (rebinding needs a name), and the names the user allows
(``--allowed-hosts`` / ``FLASHCHAT_ALLOWED_HOSTS``; ``*.example.com``, ``*`` for any). Allowed
Origins: loopback pages, the server's own origin, and the user's list (``--allowed-origins`` /
``FLASHCHAT_ORIGINS``, like ``OLLAMA_ORIGINS``: ``https://app.example.com``, ``https://*.example.com``,
``*``). Starlette's TrustedHostMiddleware is not used: it answers 400 in plain text rather than
an OpenAI error, and splits ``[::1]:8080`` at its first colon.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
HOSTS_ENV = "FLASHCHAT_ALLOWED_HOSTS"
ORIGINS_ENV = "FLASHCHAT_ORIGINS"


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def split_list(text: str | None) -> tuple[str, ...]:
    """A comma- or space-separated list (an option or an environment variable), lower-cased."""
    return tuple(item.lower() for item in (text or "").replace(",", " ").split())


def host_name(header: str) -> str | None:
    """The name or address in a ``Host`` header, without port or brackets; None if malformed."""
    try:
        parts = urlsplit("//" + header)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query:
        return None
    return parts.hostname


@dataclass(frozen=True)
class AccessPolicy:
    """The Host and Origin rules for one server (``bound``: the address it listens on)."""

    bound: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()

    @classmethod
    def from_options(
        cls, bound: str, hosts: str | None = None, origins: str | None = None
    ) -> AccessPolicy:
        """The options given, else the environment (``FLASHCHAT_ALLOWED_HOSTS``,
        ``FLASHCHAT_ORIGINS``): one rule for ``serve`` and the app's server."""
        hosts = os.environ.get(HOSTS_ENV) if hosts is None else hosts
        origins = os.environ.get(ORIGINS_ENV) if origins is None else origins
        return cls(bound.strip("[]").lower(), split_list(hosts), split_list(origins))

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request that names this server ``header`` (its Host) may be answered.
        No Host at all (HTTP/1.0) comes from no browser, so it passes."""
        if header is None:
            return True
        name = host_name(header)
        if name is None:
            return False
        if name in LOOPBACK_NAMES or name == self.bound or "*" in self.allowed_hosts:
            return True
        if self.bound in WILDCARD_BINDS and _is_ip(name):
            return True
        return any(
            name == rule or (rule.startswith("*.") and name.endswith(rule[1:]))
            for rule in self.allowed_hosts
        )

    def origin_allowed(self, origin: str | None, host_header: str | None) -> bool:
        """Whether the page at ``origin`` may use the server (no Origin: not a browser page)."""
        if origin is None:
            return True
        origin = origin.strip().lower()
        if any(fnmatchcase(origin, rule) for rule in self.allowed_origins):
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (sandboxed pages, files), extensions' schemes: by name only
        if is_loopback(parts.hostname):
            return True
        return host_header is not None and parts.netloc == host_header.strip().lower()
