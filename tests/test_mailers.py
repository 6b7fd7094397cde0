"""Real mailers, default settings, against a real runsink (issue 8 item 5, issue 22).

Each test sends the signup mail a staging app would send (text + HTML, a one-time code, a
confirmation link, a PDF attachment, ``From: "Acme" <noreply@acme.example>``) with the
library's *default* settings (only host and port given) to an inbox of a real server, and
reads it back through the HTTP API: the right code, the right link, the attachment's bytes,
and the display name in ``from_name``. Each runs twice: as configured out of the box, and
with the SMTP user name and password a staging app usually carries (runsink takes any login
by default; the user name comes back as ``envelope.auth_user``). A mailer missing here skips
with how to install it; on CI (``.ci/install/mailers.sh`` installs them all) it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import smtplib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import Server, create_inbox, make_certificate, need, start_server, wait

MAILERS = Path(__file__).parent / "mailers"
NODE_FOLDER = MAILERS / "node"
PHPMAILER = Path("/usr/share/php/libphp-phpmailer/autoload.php")
JAKARTA_JARS = [
    Path("/usr/share/java/jakarta-mail.jar"),
    Path("/usr/share/java/jakarta-activation.jar"),
]
FROM_ADDRESS, FROM_NAME = "noreply@acme.example", "Acme"
FROM = f'"{FROM_NAME}" <{FROM_ADDRESS}>'
ATTACHMENT_NAME = "welcome.pdf"
INSTALL = "bash .ci/install/mailers.sh"
# The login a staging app came with (any is accepted); the password has characters that need
# care in each mailer's config.
LOGIN = ("staging-app@acme.example", "s3cret pass:word")


@dataclass(frozen=True)
class Signup:
    """One realistic signup mail, with a code and link of its own."""

    to: str
    inbox_id: str
    code: str
    link: str
    attachment: Path
    login: tuple[str, str] | None = None

    @property
    def subject(self) -> str:
        return "Confirm your Acme account"

    @property
    def text(self) -> str:
        return (
            "Welcome to Acme!\n\n"
            f"Your verification code is {self.code}. It expires in 10 minutes.\n\n"
            f"Or confirm your email address here: {self.link}\n\n"
            "Need help? https://acme.example/help\n"
            "You got this mail because someone signed up with this address.\n"
        )

    @property
    def html(self) -> str:
        return (
            '<!doctype html><html><body style="font-family: sans-serif">'
            "<h1>Welcome to Acme!</h1>"
            f"<p>Your verification code is <strong>{self.code}</strong>.</p>"
            f'<p><a href="{self.link}" style="background:#0a7;color:#fff;padding:8px">'
            "Confirm your email</a></p>"
            '<p style="font-size:11px"><a href="https://acme.example/help">Help</a> · '
            '<a href="https://acme.example/privacy">Privacy</a></p>'
            "</body></html>"
        )

    def as_json(self, server: Server) -> str:
        return json.dumps(
            {
                "host": "127.0.0.1",
                "port": server.smtp_port,
                "from": FROM,
                "from_address": FROM_ADDRESS,
                "from_name": FROM_NAME,
                "to": self.to,
                "subject": self.subject,
                "text": self.text,
                "html": self.html,
                "attachment_path": str(self.attachment),
                "attachment_name": ATTACHMENT_NAME,
                "user": self.login[0] if self.login else None,
                "password": self.login[1] if self.login else None,
            }
        )

    def as_message(self) -> EmailMessage:
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = FROM, self.to, self.subject
        message.set_content(self.text)
        message.add_alternative(self.html, subtype="html")
        message.add_attachment(
            self.attachment.read_bytes(), "application", "pdf", filename=ATTACHMENT_NAME
        )
        return message


@pytest.fixture(params=["default", "login"])
def signup(request: pytest.FixtureRequest, http: httpx.Client, tmp_path: Path) -> Signup:
    """The signup mail, sent without a login and with the app's SMTP login."""
    return new_signup(http, tmp_path, LOGIN if request.param == "login" else None)


def new_signup(http: httpx.Client, tmp_path: Path, login: tuple[str, str] | None = None) -> Signup:
    inbox = create_inbox(http, purpose="signup-check")
    attachment = tmp_path / ATTACHMENT_NAME
    attachment.write_bytes(b"%PDF-1.4\n% Acme welcome pack\n" + secrets.token_bytes(2048))
    return Signup(
        to=inbox["address"],
        inbox_id=inbox["inbox_id"],
        code=str(secrets.randbelow(900000) + 100000),
        link=f"https://acme.example/account/confirm?token={secrets.token_hex(12)}",
        attachment=attachment,
        login=login,
    )


def run(
    command: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes = b"",
) -> None:
    environment = {**os.environ, **(env or {})}
    result = subprocess.run(
        command, capture_output=True, input=stdin, timeout=60, cwd=cwd, env=environment
    )
    output = (result.stdout + result.stderr).decode(errors="replace")
    assert result.returncode == 0, f"{command[0]} failed:\n{output}"


def read_back(http: httpx.Client, signup: Signup) -> dict[str, Any]:
    """Wait for the mail at the inbox, read it through the API, and check what an agent needs."""
    answer = wait(http, signup.inbox_id, timeout_s=10).json()
    assert answer["state"] == "received", answer
    assert answer["message"]["from"] == FROM_ADDRESS
    message: dict[str, Any] = http.get(f"/v1/messages/{answer['message']['message_id']}").json()
    assert message["from"] == FROM_ADDRESS
    assert message["from_name"] == FROM_NAME
    assert message["parse_warnings"] == []
    assert message["subject"] == signup.subject
    assert message["envelope"]["mail_from"] == FROM_ADDRESS
    # The login's user name (never its password), or null when the mailer did not log in.
    assert message["envelope"]["auth_user"] == (signup.login[0] if signup.login else None)
    assert signup.login is None or signup.login[1] not in json.dumps(message)
    assert message["codes"][0] == signup.code, message["codes"]
    assert message["links"][0] == signup.link, message["links"]
    assert signup.code in (message["text"] or "")
    assert signup.link in (message["html"] or "")
    (attachment,) = message["attachments"]
    assert attachment["filename"] == ATTACHMENT_NAME
    assert attachment["sha256"] == hashlib.sha256(signup.attachment.read_bytes()).hexdigest()
    assert attachment["size"] == signup.attachment.stat().st_size
    return message


# -- the mailers -------------------------------------------------------------------------


def test_python_smtplib(server: Server, http: httpx.Client, signup: Signup) -> None:
    """Python's smtplib + email.message, as a Flask or FastAPI app sends mail."""
    with smtplib.SMTP("127.0.0.1", server.smtp_port) as client:
        if signup.login:
            client.login(*signup.login)  # smtplib tries CRAM-MD5 first
        client.send_message(signup.as_message())
    read_back(http, signup)


def test_django_email_multi_alternatives(
    server: Server, http: httpx.Client, signup: Signup
) -> None:
    """Django's EmailMultiAlternatives over the default SMTP backend."""
    try:
        import django  # noqa: F401
    except ImportError:
        need("Django", False, "pip install django, or pip install -e '.[test]'")
    run([sys.executable, str(MAILERS / "django_send.py"), signup.as_json(server)])
    read_back(http, signup)


def test_nodemailer(server: Server, http: httpx.Client, signup: Signup) -> None:
    """Nodemailer's default transport (secure: false, STARTTLS when offered)."""
    node = shutil.which("node")
    need("Node.js", node is not None, "apt-get install nodejs npm")
    installed = (NODE_FOLDER / "node_modules" / "nodemailer").is_dir()
    need("Nodemailer", installed, f"{INSTALL}, or npm install in {NODE_FOLDER}")
    assert node is not None
    run([node, "send.js", signup.as_json(server)], cwd=NODE_FOLDER)
    read_back(http, signup)


def test_phpmailer(server: Server, http: httpx.Client, signup: Signup) -> None:
    """PHPMailer's SMTP with its defaults (SMTPAutoTLS on)."""
    php = shutil.which("php")
    need("PHP", php is not None, "apt-get install php-cli")
    need("PHPMailer", PHPMAILER.is_file(), "apt-get install libphp-phpmailer")
    assert php is not None
    run([php, str(MAILERS / "phpmailer_send.php"), signup.as_json(server)])
    read_back(http, signup)


def test_ruby_mail(server: Server, http: httpx.Client, signup: Signup) -> None:
    """Ruby's mail gem (ActionMailer's) with its default SMTP settings (starttls auto)."""
    ruby = shutil.which("ruby")
    need("Ruby", ruby is not None, "apt-get install ruby")
    assert ruby is not None
    has_gem = subprocess.run([ruby, "-e", 'require "mail"'], capture_output=True).returncode == 0
    need("Ruby's mail gem", has_gem, "apt-get install ruby-mail")
    run([ruby, str(MAILERS / "ruby_mail_send.rb"), signup.as_json(server)])
    read_back(http, signup)


def test_curl_smtp(server: Server, http: httpx.Client, signup: Signup, tmp_path: Path) -> None:
    """curl smtp:// building the MIME message itself (-F), with its defaults (no --ssl)."""
    curl = shutil.which("curl")
    need("curl", curl is not None, "apt-get install curl")
    assert curl is not None
    text, html = tmp_path / "body.txt", tmp_path / "body.html"
    text.write_text(signup.text)
    html.write_text(signup.html)
    command = [
        curl, "-sS", f"smtp://127.0.0.1:{server.smtp_port}",
        "--mail-from", FROM_ADDRESS, "--mail-rcpt", signup.to,
        "-H", f"From: {FROM}", "-H", f"To: {signup.to}", "-H", f"Subject: {signup.subject}",
        "-F", "=(;type=multipart/alternative",
        "-F", f"=<{text};type=text/plain",
        "-F", f"=<{html};type=text/html",
        "-F", "=)",
        "-F", f"=@{signup.attachment};type=application/pdf;encoder=base64",
    ]  # fmt: skip
    if signup.login:
        command += ["--user", ":".join(signup.login)]  # curl picks the mechanism
    run(command)
    read_back(http, signup)


def test_swaks(server: Server, http: httpx.Client, signup: Signup, tmp_path: Path) -> None:
    """swaks, the SMTP test tool, sending a message file as it is (--data @file)."""
    swaks = shutil.which("swaks")
    need("swaks", swaks is not None, "apt-get install swaks")
    assert swaks is not None
    data = tmp_path / "signup.eml"
    data.write_bytes(signup.as_message().as_bytes())
    command = [
        swaks, "--server", f"127.0.0.1:{server.smtp_port}",
        "--from", FROM_ADDRESS, "--to", signup.to, "--data", f"@{data}",
    ]  # fmt: skip
    if signup.login:
        command += ["--auth-user", signup.login[0], "--auth-password", signup.login[1]]
    run(command)
    read_back(http, signup)


def test_msmtp(server: Server, http: httpx.Client, signup: Signup) -> None:
    """msmtp, the sendmail of many containers, with command-line settings only."""
    msmtp = shutil.which("msmtp")
    need("msmtp", msmtp is not None, "apt-get install msmtp")
    assert msmtp is not None
    command = [msmtp, "--host=127.0.0.1", f"--port={server.smtp_port}", f"--from={FROM_ADDRESS}"]
    env = {}
    if signup.login:
        # msmtp reads the password from a command's output (never from its command line).
        # Without TLS it refuses to choose a mechanism itself ("--auth=on": "cannot use a
        # secure authentication method"), against any server: the config names one.
        env["SMTP_PASSWORD"] = signup.login[1]
        command += [
            "--auth=plain",
            f"--user={signup.login[0]}",
            '--passwordeval=echo "$SMTP_PASSWORD"',
        ]
    run([*command, "--", signup.to], env=env, stdin=signup.as_message().as_bytes())
    read_back(http, signup)


@pytest.fixture(scope="module")
def jakarta_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/mailers/JakartaSend.java compiled against Debian's Jakarta Mail (once)."""
    javac = shutil.which("javac")
    need("a JDK (javac)", javac is not None, "apt-get install default-jdk-headless")
    need(
        "Jakarta Mail",
        all(j.is_file() for j in JAKARTA_JARS),
        "apt-get install libjakarta-mail-java",
    )
    assert javac is not None
    classes = tmp_path_factory.mktemp("jakarta")
    classpath = ":".join(str(j) for j in JAKARTA_JARS)
    run([javac, "-cp", classpath, "-d", str(classes), str(MAILERS / "JakartaSend.java")])
    return classes


def test_jakarta_mail(
    server: Server, http: httpx.Client, signup: Signup, tmp_path: Path, jakarta_classes: Path
) -> None:
    """Jakarta Mail (JavaMail), as a Spring or Jakarta EE app sends mail."""
    java = shutil.which("java")
    assert java is not None  # javac came with it
    text, html = tmp_path / "body.txt", tmp_path / "body.html"
    text.write_text(signup.text)
    html.write_text(signup.html)
    classpath = ":".join(str(j) for j in [jakarta_classes, *JAKARTA_JARS])
    command = [
        java, "-cp", classpath, "JakartaSend", "127.0.0.1", str(server.smtp_port),
        FROM_ADDRESS, FROM_NAME, signup.to, signup.subject, str(text), str(html),
        str(signup.attachment), ATTACHMENT_NAME, *(signup.login or ()),
    ]  # fmt: skip
    run(command)
    read_back(http, signup)


# -- the same mailers over STARTTLS, with a certificate they trust (the README's TLS set-up) --


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """--smtp-require-tls: a mail that arrives went over TLS."""
    folder = tmp_path_factory.mktemp("mailers-tls")
    cert, key = make_certificate(folder / "tls", "sink.test")
    running = start_server(
        folder, "--tls-cert", str(cert), "--tls-key", str(key), "--smtp-require-tls"
    )
    yield running
    running.stop()


def _tls_node(server: Server, signup: Signup, cert: Path) -> None:
    node = shutil.which("node")
    need("Node.js", node is not None, "apt-get install nodejs npm")
    need("Nodemailer", (NODE_FOLDER / "node_modules" / "nodemailer").is_dir(), INSTALL)
    assert node is not None
    run([node, "send.js", signup.as_json(server)], NODE_FOLDER, {"NODE_EXTRA_CA_CERTS": str(cert)})


def _tls_php(server: Server, signup: Signup, cert: Path) -> None:
    php = shutil.which("php")
    need("PHPMailer", php is not None and PHPMAILER.is_file(), INSTALL)
    assert php is not None
    script = str(MAILERS / "phpmailer_send.php")
    run([php, "-d", f"openssl.cafile={cert}", script, signup.as_json(server)])


def _tls_ruby(server: Server, signup: Signup, cert: Path) -> None:
    ruby = shutil.which("ruby")
    need("Ruby's mail gem", ruby is not None, INSTALL)
    assert ruby is not None
    script = str(MAILERS / "ruby_mail_send.rb")
    run([ruby, script, signup.as_json(server)], env={"SSL_CERT_FILE": str(cert)})


@pytest.mark.parametrize(
    "send", [_tls_node, _tls_php, _tls_ruby], ids=["nodemailer", "phpmailer", "ruby-mail"]
)
def test_mailers_that_upgrade_send_over_starttls_with_a_trusted_certificate(
    tls_server: Server, tmp_path: Path, send: Any
) -> None:
    """Given a certificate they trust, the mailers that upgrade by default do, and deliver."""
    cert = tls_server.args[tls_server.args.index("--tls-cert") + 1]
    with tls_server.http() as http:
        signup = new_signup(http, tmp_path)
        send(tls_server, signup, Path(cert))
        read_back(http, signup)


def mailer_versions() -> dict[str, str]:
    """Each mailer's version here (for the README's table); "missing" when not installed."""

    def output(command: list[str], cwd: Path | None = None) -> str:
        try:
            result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=30)
        except OSError:
            return "missing"
        return result.stdout.strip() if result.returncode == 0 else "missing"

    try:
        import django

        django_version = django.get_version()
    except ImportError:
        django_version = "missing"
    return {
        "Python smtplib": sys.version.split()[0],
        "Django EmailMultiAlternatives": django_version,
        "Nodemailer": output(
            ["node", "-p", 'require("nodemailer/package.json").version'], NODE_FOLDER
        ),
        "PHPMailer": output(
            ["php", "-r", f"require '{PHPMAILER}'; echo PHPMailer\\PHPMailer\\PHPMailer::VERSION;"]
        ),
        "Ruby mail": output(["ruby", "-e", 'require "mail"; print Mail::VERSION::STRING']),
        "curl": (output(["curl", "--version"]).split() or ["", "missing"])[1],
        "swaks": (output(["swaks", "--version"]).split() or ["", "", "missing"])[2],
        "msmtp": (output(["msmtp", "--version"]).split() or ["", "", "missing"])[2],
        "Jakarta Mail": output(["dpkg-query", "-W", "-f=${Version}", "libjakarta-mail-java"]),
    }


if __name__ == "__main__":  # python -m tests.test_mailers: the versions, for the README
    for library, version in mailer_versions().items():
        print(f"| {library} | {version} |")
    os._exit(0)
