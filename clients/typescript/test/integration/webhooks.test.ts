import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { NotFound, Sink, verifyWebhook, type RunsinkServer, type WebhookEvent } from "../../dist/index.js";
import { startTestServer } from "../server.js";
import { sendMail } from "../smtp.js";

let server: RunsinkServer;
let sink: Sink;
let receiver: Server;
let receiverUrl: string;
let secret = "";
const events: WebhookEvent[] = [];
const arrivals: Array<() => void> = [];

before(async () => {
  server = await startTestServer();
  sink = new Sink({ url: server.url });
  receiver = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    try {
      events.push(verifyWebhook(secret, req.headers, Buffer.concat(chunks)));
      res.writeHead(204).end();
      arrivals.splice(0).forEach((wake) => wake());
    } catch {
      res.writeHead(400).end();
    }
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
});
after(async () => {
  await new Promise((resolve) => receiver?.close(resolve));
  await server?.stop();
});

/** Until an event the predicate accepts has arrived (20 s at most). */
async function arrived(accept: (event: WebhookEvent) => boolean): Promise<WebhookEvent> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const found = events.find(accept);
    if (found) return found;
    const left = deadline - Date.now();
    assert.ok(left > 0, `no such event within 20 s; got ${JSON.stringify(events)}`);
    await new Promise<void>((resolve) => {
      arrivals.push(resolve);
      setTimeout(resolve, Math.min(left, 500));
    });
  }
}

describe("webhooks against a real runsink serve", () => {
  it("creates a webhook whose deliveries verifyWebhook accepts; lists, pings, deletes it", async () => {
    const runId = `ts-hook-${randomBytes(4).toString("hex")}`;
    const hook = await sink.createWebhook({ url: receiverUrl, runId, events: ["message", "inbox"] });
    assert.match(hook.secret ?? "", /^whsec_/);
    assert.deepEqual(hook.events, ["message", "inbox"]);
    secret = hook.secret ?? "";
    const inbox = await sink.createInbox({ runId, purpose: "webhook" });
    const mail = { to: inbox.address, subject: "Hi", text: "Code 482913" };
    await sendMail(server.smtpHost, server.smtpPort, mail);
    const message = await arrived((e) => e.type === "message");
    assert.equal(message.data["run_id"], runId);
    assert.equal(message.data["inbox_id"], inbox.inboxId);

    const listed = await sink.listWebhooks();
    assert.ok(listed.some((h) => h.webhook_id === hook.webhook_id && h.secret === undefined));
    assert.equal((await sink.getWebhook(hook.webhook_id)).run_id, runId);
    const pingId = await sink.testWebhook(hook.webhook_id);
    await arrived((e) => e.type === "ping");
    // The server records an attempt once it has read the receiver's answer: a moment after
    // the receiver has seen it, so the listing is read until it shows it (10 s at most).
    const deadline = Date.now() + 10_000;
    let page = await sink.listDeliveries(hook.webhook_id, { limit: 50 });
    while (!page.deliveries.some((d) => d.event_id === message.id && d.state === "delivered")) {
      assert.ok(Date.now() < deadline, `not listed delivered: ${JSON.stringify(page.deliveries)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
      page = await sink.listDeliveries(hook.webhook_id, { limit: 50 });
    }
    assert.ok(page.deliveries.some((d) => d.delivery_id === pingId));
    await sink.deleteWebhook(hook.webhook_id);
    await assert.rejects(sink.getWebhook(hook.webhook_id), NotFound);
  });
});
