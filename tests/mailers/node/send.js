// Nodemailer with its default transport settings (secure: false, opportunistic STARTTLS):
// only host and port are given, as a staging app's config would.
// argv[2]: the mail as JSON (see tests/test_mailers.py).
"use strict";
const nodemailer = require("nodemailer");

const mail = JSON.parse(process.argv[2]);
const transport = nodemailer.createTransport({ host: mail.host, port: mail.port });
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
