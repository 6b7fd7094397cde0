// A tiny signup app: enter a name and an email address, get a 6-digit code by mail, type it in.
// node:http and Nodemailer only. The SMTP server comes from SMTP_HOST / SMTP_PORT (runsink's).
import { randomInt } from "node:crypto";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import nodemailer from "nodemailer";

const page = (body) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Acme signup</title></head><body>${body}</body></html>`;
const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const signupForm = page(`<h1>Sign up</h1>
<form method="post" action="/signup">
  <label>Name <input name="name" required></label>
  <label>Email <input name="email" type="email" required></label>
  <button>Sign up</button>
</form>`);

const verifyForm = (email) =>
  page(`<h1>Check your mail</h1>
<p>We sent a code to ${escape(email)}.</p>
<form method="post" action="/verify">
  <input type="hidden" name="email" value="${escape(email)}">
  <label>Code <input name="code" inputmode="numeric" required></label>
  <button>Verify</button>
</form>`);

async function form(request) {
  let body = "";
  for await (const chunk of request) body += chunk;
  return new URLSearchParams(body);
}

export function createApp({ smtpHost = "127.0.0.1", smtpPort = 1025 } = {}) {
  const mailer = nodemailer.createTransport({
    host: smtpHost,
    port: smtpPort,
    secure: false,
    ignoreTLS: true,
  });
  const codes = new Map();
  return createServer(async (request, response) => {
    const send = (status, html) =>
      response.writeHead(status, { "content-type": "text/html; charset=utf-8" }).end(html);
    try {
      if (request.method === "GET" && request.url === "/") return send(200, signupForm);
      if (request.method === "POST" && request.url === "/signup") {
        const fields = await form(request);
        const email = fields.get("email") ?? "";
        const code = String(randomInt(100000, 1000000));
        codes.set(email, code);
        await mailer.sendMail({
          from: '"Acme" <noreply@acme.test>',
          to: email,
          subject: "Your Acme sign-up code",
          text: `Hi ${fields.get("name") ?? ""},\n\nYour sign-up code is ${code}.\n`,
        });
        return send(200, verifyForm(email));
      }
      if (request.method === "POST" && request.url === "/verify") {
        const fields = await form(request);
        const ok = codes.get(fields.get("email") ?? "") === fields.get("code");
        return send(ok ? 200 : 400, page(ok ? "<p>Email verified</p>" : "<p>Wrong code</p>"));
      }
      return send(404, page("<p>Not found</p>"));
    } catch (error) {
      return send(500, page(`<p>Could not send the code: ${escape(error.message)}</p>`));
    }
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const port = Number(process.env.PORT ?? 3000);
  createApp({ smtpHost: process.env.SMTP_HOST, smtpPort: Number(process.env.SMTP_PORT ?? 1025) }).listen(
    port,
    () => console.log(`signup app on http://127.0.0.1:${port}`),
  );
}
