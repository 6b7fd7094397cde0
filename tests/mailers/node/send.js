// Nodemailer with its default transport settings (secure: false, opportunistic STARTTLS):
// only host and port are given, and auth when the mail has a login, as a staging app's config
// would.
// argv[2]: the mail as JSON (see tests/test_mailers.py).
"use strict";
const nodemailer = require("nodemailer");

const mail = JSON.parse(process.argv[2]);
const options = { host: mail.host, port: mail.port };
if (mail.user !== null) options.auth = { user: mail.user, pass: mail.password };
const transport = nodemailer.createTransport(options);
transport
  .sendMail({
    from: mail.from,
    to: mail.to,
    subject: mail.subject,
    text: mail.text,
    html: mail.html,
    attachments: [{ filename: mail.attachment_name, path: mail.attachment_path }],
  })
  .then((info) => console.log(info.response))
  .catch((error) => {
    console.error(error);
    process.exit(1);
  });
