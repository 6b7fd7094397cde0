"""Django's EmailMultiAlternatives over its default SMTP backend (no TLS): only EMAIL_HOST and
EMAIL_PORT are set, and EMAIL_HOST_USER / EMAIL_HOST_PASSWORD when the mail has a login, as a
staging app's settings would. argv[1]: the mail as JSON.
"""

import json
import sys

import django
from django.conf import settings

mail = json.loads(sys.argv[1])
settings.configure(
    EMAIL_HOST=mail["host"],
    EMAIL_PORT=mail["port"],
    EMAIL_HOST_USER=mail["user"] or "",
    EMAIL_HOST_PASSWORD=mail["password"] or "",
)
django.setup()

from django.core.mail import EmailMultiAlternatives  # noqa: E402 - needs the settings

message = EmailMultiAlternatives(mail["subject"], mail["text"], mail["from"], [mail["to"]])
message.attach_alternative(mail["html"], "text/html")
with open(mail["attachment_path"], "rb") as attachment:
    message.attach(mail["attachment_name"], attachment.read(), "application/pdf")
message.send(fail_silently=False)
print("sent")
