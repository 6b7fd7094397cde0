"""Settings: read once at start-up from flags, ``RUNSINK_*`` variables and the policy file.

A flag beats the environment, which beats the default. Everything is checked
at once, into one frozen object; a bad value is a ``ConfigError`` naming the
flag (and variable), or the file, policy and key. No other module reads
``os.environ``.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sink.errors import ConfigError
from sink.policy import Policy, load_policies
from sink.tokens import TokenEntry, api_token_entry, check_token_text, load_tokens_file
from sink.webhooks.schedule import DELAYS_S

_DOMAIN = re.compile(
    r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
)
_LEVELS = ("debug", "info", "warning", "error")
_LOOPS = ("auto", "uvloop", "asyncio")  # auto: uvloop where it is installed


@dataclass(frozen=True, slots=True)
class Settings:
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 1025
    http_host: str = "127.0.0.1"
    http_port: int = 8025
    db: Path = Path("runsink.db")
    db_url: str | None = None  # --db postgresql://...: PostgreSQL instead of the SQLite file
    domain: str = "sink.test"  # where inbox addresses are made: the first concrete --domain
    # Every --domain given (``*.example.test`` wildcards included); empty means just ``domain``.
    domains: tuple[str, ...] = ()
    reject_unknown_recipients: bool = False
    policy_file: Path | None = None
    default_policy: str = "ci"
    enable_faults: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    api_token: str | None = field(default=None, repr=False)
    tokens_file: Path | None = None
    insecure_no_auth: bool = False
    # --smtp-auth USER:PASSWORD pairs: AUTH checks them. Empty: any login is accepted.
    smtp_auth: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    no_smtp_auth: bool = False  # --no-smtp-auth: no AUTH offered at all (v2)
    smtp_max_connections: int = 512
    smtp_no_starttls: bool = False
    smtp_require_tls: bool = False
    smtps_port: int | None = None
    http_max_connections: int = 4096
    http_header_timeout: float = 10.0
    http_keepalive_timeout: float = 30.0
    max_store_mb: int | None = None
    # Host names served besides localhost, loopback literals and the bound address
    # (api/local_safety.py); "*" turns the Host check off.
    allowed_hosts: tuple[str, ...] = ()
    # Origins (scheme://host[:port]) whose pages may send state-changing requests.
    allowed_origins: tuple[str, ...] = ()
    log_level: str = "info"
    event_loop: str = "auto"
    # Seconds between a webhook delivery's attempts: one retry per value (the contract's
    # schedule by default; tests shorten it).
    webhook_retry_s: tuple[float, ...] = DELAYS_S
    # Webhook attempts are made by a child process (sink/webhooks/child.py), off the loop
    # that takes mail; False: on that loop (tests of the worker itself).
    webhook_child: bool = True
    policies: dict[str, Policy] = field(default_factory=lambda: load_policies(None))
    # The tokens file's entries (read once, at start-up); --api-token is added by ``tokens``.
    file_tokens: tuple[TokenEntry, ...] = field(default=(), repr=False)

    def policy(self, name: str) -> Policy:
        """The named policy; an inbox stored under a policy since removed from the file
        lives on under ``ci``."""
        return self.policies.get(name) or self.policies["ci"]

    @property
    def tokens(self) -> tuple[TokenEntry, ...]:
        """Every configured token: --api-token (admin) and the tokens file's."""
        given = (api_token_entry(self.api_token),) if self.api_token else ()
        return given + self.file_tokens

    @property
    def accepted_domains(self) -> tuple[str, ...]:
        """The domains (and ``*.`` wildcards) whose mail may route to an inbox."""
        return self.domains or (self.domain,)

    def is_our_domain(self, domain: str) -> bool:
        domain = domain.lower()
        for pattern in self.accepted_domains:
            if pattern.startswith("*."):
                if domain.endswith(pattern[1:]) and len(domain) > len(pattern) - 1:
                    return True
            elif domain == pattern:
                return True
        return False

    @property
    def store(self) -> str:
        """The store as a log line may name it: the SQLite file, or the PostgreSQL URL
        without its password."""
        return str(self.db) if self.db_url is None else _without_password(self.db_url)

    @property
    def catch_all_retention_s(self) -> int:
        """How long caught mail is kept: the default policy's value applies."""
        return self.policy(self.default_policy).catch_all_retention_s

    @property
    def caught_withheld_from_agents(self) -> bool:
        """Whether agents get caught mail without bodies: it belongs to no inbox, so the
        default policy's ``agent_body`` applies (as its ``catch_all_retention_s`` does)."""
        return self.policy(self.default_policy).agent_body == "never"

    @property
    def largest_message_bytes(self) -> int:
        return max(p.max_message_bytes for p in self.policies.values())


# (flag, environment variable, kind)
_OPTIONS: list[tuple[str, str, str]] = [
    ("smtp-host", "RUNSINK_SMTP_HOST", "host"),
    ("smtp-port", "RUNSINK_SMTP_PORT", "port"),
    ("http-host", "RUNSINK_HTTP_HOST", "host"),
    ("http-port", "RUNSINK_HTTP_PORT", "port"),
    ("db", "RUNSINK_DB", "db"),
    ("domain", "RUNSINK_DOMAIN", "domains"),
    ("policy-file", "RUNSINK_POLICY_FILE", "file"),
    ("default-policy", "RUNSINK_DEFAULT_POLICY", "text"),
    ("enable-faults", "RUNSINK_ENABLE_FAULTS", "bool"),
    ("tls-cert", "RUNSINK_TLS_CERT", "file"),
    ("tls-key", "RUNSINK_TLS_KEY", "file"),
    ("api-token", "RUNSINK_API_TOKEN", "text"),
    ("tokens-file", "RUNSINK_TOKENS_FILE", "file"),
    ("insecure-no-auth", "RUNSINK_INSECURE_NO_AUTH", "bool"),
    ("smtp-auth", "RUNSINK_SMTP_AUTH", "logins"),
    ("no-smtp-auth", "RUNSINK_NO_SMTP_AUTH", "bool"),
    ("smtp-max-connections", "RUNSINK_SMTP_MAX_CONNECTIONS", "positive"),
    ("smtp-no-starttls", "RUNSINK_SMTP_NO_STARTTLS", "bool"),
    ("smtp-require-tls", "RUNSINK_SMTP_REQUIRE_TLS", "bool"),
    ("smtps-port", "RUNSINK_SMTPS_PORT", "port"),
    ("http-max-connections", "RUNSINK_HTTP_MAX_CONNECTIONS", "positive"),
    ("http-header-timeout", "RUNSINK_HTTP_HEADER_TIMEOUT", "seconds"),
    ("http-keepalive-timeout", "RUNSINK_HTTP_KEEPALIVE_TIMEOUT", "seconds"),
    ("max-store-mb", "RUNSINK_MAX_STORE_MB", "positive"),
    ("reject-unknown-recipients", "RUNSINK_REJECT_UNKNOWN_RECIPIENTS", "bool"),
    ("allowed-hosts", "RUNSINK_ALLOWED_HOSTS", "hosts"),
    ("allowed-origins", "RUNSINK_ALLOWED_ORIGINS", "origins"),
    ("log-level", "RUNSINK_LOG_LEVEL", "level"),
    ("event-loop", "RUNSINK_EVENT_LOOP", "loop"),
    ("webhook-retry-s", "RUNSINK_WEBHOOK_RETRY_S", "delays"),
]


# flag -> what it does and its default, for ``runsink serve --help``.
_HELP: dict[str, str] = {
    "smtp-host": "address the SMTP listener binds (default: 127.0.0.1)",
    "smtp-port": "SMTP port; 0 picks any free port (default: 1025)",
    "http-host": "address the HTTP API binds; not loopback needs --api-token or --tokens-file "
    "(default: 127.0.0.1)",
    "http-port": "HTTP API port; 0 picks any free port (default: 8025)",
    "db": "SQLite database file, created if missing (default: ./runsink.db), or a "
    "postgresql://user[:password]@host:port/dbname URL",
    "domain": "a mail domain whose addresses route to inboxes; repeatable, *.example.test "
    "wildcards too; inbox addresses use the first plain one; the environment variable takes "
    "a comma-separated list (default: sink.test)",
    "reject-unknown-recipients": "550 at RCPT for an address without a live inbox, naming the "
    "accepted domains, instead of keeping it as caught mail (default: off)",
    "policy-file": "TOML file of policies, added to or replacing the built-ins (default: none)",
    "default-policy": "policy of an inbox created without one (default: ci)",
    "enable-faults": "allow fault injection at /v1/faults, never under production (default: off)",
    "tls-cert": "PEM certificate (chain) for STARTTLS and --smtps-port; with --tls-key, "
    "STARTTLS is offered (default: none, no STARTTLS)",
    "tls-key": "PEM private key of --tls-cert (default: none)",
    "api-token": "bearer token the HTTP API requires, 16+ characters; the admin scope "
    "(default: none)",
    "tokens-file": "TOML file of named tokens, each with a scope: admin, read or runs:<glob> "
    "(default: none)",
    "insecure-no-auth": "serve the API without a token on a non-loopback --http-host "
    "(default: off)",
    "smtp-auth": "USER:PASSWORD that SMTP clients must AUTH with (PLAIN, LOGIN, CRAM-MD5); "
    "repeatable, split at the first colon; the environment variable holds one pair "
    "(default: none: any login is accepted, and mail without AUTH too)",
    "no-smtp-auth": "offer no SMTP AUTH at all; the AUTH command is 502 (default: off: AUTH "
    "offered, any login accepted)",
    "smtp-max-connections": "open SMTP connections; one more gets 421 or the place of one "
    "idle; lowered to fit the descriptor limit (default: 512)",
    "http-max-connections": "open HTTP connections; one more gets the place of an idle one, "
    "else 503; lowered to fit the descriptor limit (default: 4096)",
    "http-header-timeout": "seconds a request's head (and body) may take to arrive; then 408 "
    "(default: 10)",
    "http-keepalive-timeout": "seconds an idle kept-alive HTTP connection stays open (default: 30)",
    "smtp-no-starttls": "do not offer STARTTLS even with --tls-cert; without a certificate "
    "it is never offered, so this does nothing (default: off)",
    "smtp-require-tls": "refuse MAIL with 530 until STARTTLS (or on --smtps-port); needs "
    "--tls-cert (default: off)",
    "smtps-port": "also listen for implicit TLS (SMTPS) on this port; needs --tls-cert; 0 picks "
    "any free port (default: off)",
    "max-store-mb": "beyond this size, delete the oldest caught mail, then release the oldest "
    "expired evidence (default: no cap)",
    "allowed-hosts": "a Host name the HTTP API also answers to, besides localhost, loopback "
    "addresses and --http-host (e.g. the name other containers use); repeatable; the "
    "environment variable takes a comma-separated list; * turns the check off, which lets "
    "any web page reach the API through DNS rebinding (default: none)",
    "allowed-origins": "an origin (http://host:port) whose web pages may send the API "
    "changes (POST, DELETE); repeatable; the environment variable takes a comma-separated "
    "list (default: none)",
    "log-level": "debug, info, warning or error (default: info)",
    "event-loop": "auto (uvloop where installed), uvloop or asyncio (default: auto)",
    "webhook-retry-s": "seconds between a webhook delivery's attempts, comma-separated, one "
    "retry per value (default: 1,5,30,120,600,1800,3600)",
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, env, kind in _OPTIONS:
        dest = flag.replace("-", "_")
        text = f"{_HELP[flag]}; env {env}" if flag in _HELP else f"env {env}"
        # argparse expands "%" in help texts.
        text = text.replace("%", "%%")
        if kind == "bool":
            parser.add_argument(
                f"--{flag}", dest=dest, action="store_true", default=None, help=text
            )
        elif kind in ("domains", "hosts", "origins", "logins"):
            parser.add_argument(
                f"--{flag}",
                dest=dest,
                action="append",
                default=None,
                metavar={
                    "domains": "DOMAIN",
                    "hosts": "NAME",
                    "origins": "ORIGIN",
                    "logins": "USER:PASSWORD",
                }[kind],
                help=text,
            )
        else:
            parser.add_argument(
                f"--{flag}", dest=dest, default=None, metavar=kind.upper(), help=text
            )


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Flags beat the environment, which beats the defaults; all checked here, once."""
    raw: dict[str, object] = {}
    for flag, env, kind in _OPTIONS:
        dest = flag.replace("-", "_")
        given = getattr(args, dest, None)
        source = f"--{flag}"
        if given is None and env in environ:
            given = environ[env]
            source = f"--{flag} (from {env})"
        if given is None:
            continue
        raw[dest] = _parse(source, kind, given)

    if isinstance(raw.get("db"), str):
        raw["db_url"] = raw.pop("db")
    domains = raw.pop("domain", None)
    if isinstance(domains, tuple):
        concrete = [d for d in domains if not d.startswith("*.")]
        if not concrete:
            raise ConfigError(
                "--domain: give at least one domain without a wildcard (inbox addresses are "
                "made under it), e.g. --domain sink.test --domain '*.example.test'"
            )
        raw["domain"] = concrete[0]
        raw["domains"] = domains
    policy_file = raw.get("policy_file")
    policies = load_policies(policy_file if isinstance(policy_file, Path) else None)
    tokens_file = raw.get("tokens_file")
    file_tokens = load_tokens_file(tokens_file) if isinstance(tokens_file, Path) else ()
    settings = Settings(**raw, policies=policies, file_tokens=file_tokens)  # type: ignore[arg-type]
    _check(settings)
    return settings


def _parse(source: str, kind: str, value: object) -> object:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{source}: expected true or false, got {value!r}")
    text = str(value)
    if kind == "port":
        if not text.isdigit() or not 0 <= int(text) <= 65535:
            raise ConfigError(f"{source}: expected a port number 0-65535, got {text!r}")
        return int(text)
    if kind == "positive":
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(f"{source}: expected a whole number >= 1, got {text!r}")
        return int(text)
    if kind == "seconds":
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or not 0 < seconds <= 3600:
            raise ConfigError(f"{source}: expected seconds in (0, 3600], got {text!r}")
        return seconds
    if kind == "host":
        if not text or any(c.isspace() for c in text):
            raise ConfigError(f"{source}: expected a host name or IP address, got {text!r}")
        return text
    if kind == "domains":
        given = value if isinstance(value, list) else text.replace(",", " ").split()
        if not given:
            raise ConfigError(f"{source}: expected a mail domain such as sink.test")
        return tuple(dict.fromkeys(_domain(source, str(item)) for item in given))
    if kind in ("hosts", "origins"):
        given = value if isinstance(value, list) else text.replace(",", " ").split()
        check = _allowed_host if kind == "hosts" else _allowed_origin
        return tuple(dict.fromkeys(check(source, str(item)) for item in given))
    if kind == "logins":
        return tuple(
            _login(source, str(item)) for item in (value if isinstance(value, list) else [text])
        )
    if kind == "delays":
        return _delays(source, text)
    if kind == "level":
        if text.lower() not in _LEVELS:
            raise ConfigError(f"{source}: expected one of {', '.join(_LEVELS)}, got {text!r}")
        return text.lower()
    if kind == "loop":
        if text.lower() not in _LOOPS:
            raise ConfigError(f"{source}: expected one of {', '.join(_LOOPS)}, got {text!r}")
        return text.lower()
    if kind == "file":
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"{source}: no readable file at {text!r}")
        return path
    if kind == "db":
        return _database(source, text)
    if kind == "path":
        if not text:
            raise ConfigError(f"{source}: expected a file path")
        return Path(text)
    if source.startswith("--api-token"):
        problem = check_token_text(text)
        if problem is not None:
            raise ConfigError(f"{source}: {problem}")
    return text


def _login(source: str, text: str) -> tuple[str, str]:
    """``USER:PASSWORD``, split at the first colon (a password may hold colons)."""
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        # Never echo the value: it holds a password.
        raise ConfigError(f"{source}: expected USER:PASSWORD (a user name, a colon, a password)")
    if any(not c.isprintable() for c in text):
        raise ConfigError(f"{source}: USER:PASSWORD must not hold control characters")
    return user, password


def _domain(source: str, text: str) -> str:
    domain = text.strip().lower()
    bare = domain[2:] if domain.startswith("*.") else domain
    if not _DOMAIN.fullmatch(bare) or ("." not in bare and bare != "localhost"):
        raise ConfigError(
            f"{source}: expected a mail domain such as sink.test or *.example.test, got {text!r}"
        )
    return domain


def _allowed_host(source: str, text: str) -> str:
    """A Host name (``*.`` wildcard allowed), an IP address, or ``*`` (no check)."""
    name = text.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "*":
        return name
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    bare = name[2:] if name.startswith("*.") else name
    if not _DOMAIN.fullmatch(bare):
        raise ConfigError(
            f"{source}: expected a host name (a *. wildcard allowed), an IP address or *, "
            f"got {text!r}"
        )
    return name


_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def browser_origin(text: str) -> str:
    """An origin as a browser's ``Origin`` header spells it: lowercase, no final slash, and
    no port when it is the scheme's own (RFC 6454 6.1): ``https://app.test:443/`` is
    ``https://app.test``."""
    origin = text.strip().lower().rstrip("/")
    default_port = _DEFAULT_PORTS.get(origin.partition("://")[0])
    return origin.removesuffix(default_port) if default_port else origin


def _allowed_origin(source: str, text: str) -> str:
    """``scheme://host[:port]``, as a browser's ``Origin`` header spells it."""
    origin = browser_origin(text)
    url = urlsplit(origin)
    try:
        url.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        url = urlsplit("")
    if url.scheme not in ("http", "https") or not url.hostname or url.path or url.query:
        raise ConfigError(
            f"{source}: expected an origin such as http://localhost:3000, got {text!r}"
        )
    return origin


def _check(settings: Settings) -> None:
    if settings.default_policy not in settings.policies:
        raise ConfigError(
            f"--default-policy: unknown policy {settings.default_policy!r} "
            f"(known: {', '.join(sorted(settings.policies))})"
        )
    if settings.smtp_auth and settings.no_smtp_auth:
        raise ConfigError(
            "--smtp-auth with --no-smtp-auth: the first checks logins, the second offers no "
            "AUTH at all; give one or neither"
        )
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together: give both or neither")
    if settings.tls_cert is None:
        for flag, given in (
            ("--smtp-require-tls", settings.smtp_require_tls),
            ("--smtps-port", settings.smtps_port is not None),
        ):
            if given:
                raise ConfigError(f"{flag}: needs a certificate: give --tls-cert and --tls-key")
    if settings.smtp_require_tls and settings.smtp_no_starttls and settings.smtps_port is None:
        raise ConfigError(
            "--smtp-require-tls with --smtp-no-starttls: no client could ever send; "
            "drop one, or add --smtps-port"
        )
    if settings.db_url is None and not settings.db.parent.exists():
        raise ConfigError(f"--db: the folder {str(settings.db.parent)!r} does not exist")
    if settings.api_token is not None:
        admin_digest = api_token_entry(settings.api_token).digest
        for entry in settings.file_tokens:
            if entry.digest == admin_digest:
                raise ConfigError(
                    f"--tokens-file {settings.tokens_file}: [tokens.{entry.name}] has the same "
                    "token as --api-token (which is admin); give each token one scope"
                )
    if not settings.tokens and not settings.insecure_no_auth and not _loopback(settings.http_host):
        raise ConfigError(
            f"--http-host {settings.http_host}: the API would be reachable from other machines "
            "without a token; give --api-token (RUNSINK_API_TOKEN) or --tokens-file "
            "(RUNSINK_TOKENS_FILE), or --insecure-no-auth for a trusted local network"
        )


def _database(source: str, text: str) -> Path | str:
    """A SQLite file path, or a ``postgresql://user[:pw]@host[:port]/dbname`` URL."""
    if not text:
        raise ConfigError(f"{source}: expected a file path or a postgresql:// URL")
    if not text.startswith(("postgresql://", "postgres://")):
        return Path(text)
    url = urlsplit(text)
    try:
        port = url.port
    except ValueError:
        port = -1
    if not url.hostname or port == -1 or not url.path.strip("/"):
        # The URL may hold a password: name its shape, never echo it.
        raise ConfigError(f"{source}: expected postgresql://user[:password]@host[:port]/dbname")
    return text


def _without_password(url: str) -> str:
    """``postgresql://user:pw@host/db?password=pw&sslmode=x`` -> ``postgresql://user@host/db?sslmode=x``."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _delays(source: str, text: str) -> tuple[float, ...]:
    parts = [p.strip() for p in text.split(",")]
    try:
        delays = tuple(float(p) for p in parts)
    except ValueError:
        delays = ()
    if not 1 <= len(delays) <= 20 or not all(math.isfinite(d) and 0 < d <= 86400 for d in delays):
        raise ConfigError(
            f"{source}: expected 1 to 20 comma-separated seconds in (0, 86400], such as "
            f"1,5,30,120,600,1800,3600; got {text!r}"
        )
    return delays
