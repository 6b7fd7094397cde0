/** A small SMTP client for the tests: real SMTP over a real socket to the real server. */

import { Socket, connect } from "node:net";

export interface Mail {
  from?: string;
  to: string;
  subject: string;
  text: string;
}

/** Send one message; resolves after the server's 250 to the final dot. */
export async function sendMail(host: string, port: number, mail: Mail): Promise<void> {
  const socket = connect({ host, port });
  socket.setEncoding("utf8");
  const replies = replyReader(socket);
  const expect = async (code: string, command?: string): Promise<void> => {
    if (command !== undefined) socket.write(`${command}\r\n`);
    const reply = await replies.next();
    if (!reply.startsWith(code))
      throw new Error(`SMTP ${command ?? "greeting"}: expected ${code}, got ${reply}`);
  };
  try {
    await expect("220");
    await expect("250", "EHLO tests.example");
    await expect("250", `MAIL FROM:<${mail.from ?? "app@example.test"}>`);
    await expect("250", `RCPT TO:<${mail.to}>`);
    await expect("354", "DATA");
    const body = [
      `From: App <${mail.from ?? "app@example.test"}>`,
      `To: <${mail.to}>`,
      `Subject: ${mail.subject}`,
      "MIME-Version: 1.0",
      "Content-Type: text/plain; charset=utf-8",
      "",
      ...mail.text.split("\n").map((line) => (line.startsWith(".") ? `.${line}` : line)),
      ".",
    ].join("\r\n");
    await expect("250", body);
    await expect("221", "QUIT");
  } finally {
    socket.destroy();
  }
}

/** Complete SMTP replies (the last line of a multi-line reply has a space after the code). */
function replyReader(socket: Socket): { next(): Promise<string> } {
  let buffer = "";
  let lines: string[] = [];
  const ready: string[] = [];
  const waiting: ((reply: string) => void)[] = [];
  let failure: Error | null = null;
  const rejecters: ((error: Error) => void)[] = [];
  socket.on("data", (chunk: string) => {
    buffer += chunk;
    let index: number;
    while ((index = buffer.indexOf("\r\n")) >= 0) {
      const line = buffer.slice(0, index);
      buffer = buffer.slice(index + 2);
      lines.push(line);
      if (line.length < 4 || line[3] !== "-") {
        const reply = lines.join("\n");
        lines = [];
        const waiter = waiting.shift();
        rejecters.shift();
        if (waiter) waiter(reply);
        else ready.push(reply);
      }
    }
  });
  const fail = (error: Error) => {
    failure = error;
    for (const reject of rejecters.splice(0)) reject(error);
    waiting.splice(0);
  };
  socket.on("error", fail);
  socket.on("close", () => fail(new Error("SMTP connection closed")));
  return {
    next: () => {
      const reply = ready.shift();
      if (reply !== undefined) return Promise.resolve(reply);
      if (failure) return Promise.reject(failure);
      return new Promise((resolve, reject) => {
        waiting.push(resolve);
        rejecters.push(reject);
      });
    },
  };
}
