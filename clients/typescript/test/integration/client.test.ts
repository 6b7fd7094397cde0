import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import {
  AlreadyClaimedByOther,
  BudgetSpent,
  CircuitOpen,
  EvidenceNotFound,
  InboxExpired,
  NotFound,
  Sink,
  UnexpectedMessage,
  WrongRun,
  type RunsinkServer,
} from "../../dist/index.js";
import { startTestServer } from "../server.js";
import { sendMail } from "../smtp.js";

let server: RunsinkServer;
let sink: Sink;
const runId = (label: string) => `ts-${label}-${randomBytes(4).toString("hex")}`;
const send = (to: string, subject: string, text: string) =>
  sendMail(server.smtpHost, server.smtpPort, { to, subject, text });

async function fault(body: Record<string, unknown>): Promise<void> {
  const response = await fetch(`${server.url}/v1/faults`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 201, await response.text());
}

before(async () => {
  server = await startTestServer("--enable-faults");
  sink = new Sink({ url: server.url });
});
after(async () => {
  await server?.stop();
});

describe("against a real runsink serve", () => {
  it("creates an inbox, long-polls until the mail arrives, claims it and reads it", async () => {
    const inbox = await sink.createInbox({ runId: runId("signup"), purpose: "signup" });
    assert.match(inbox.address, /@sink\.test$/);
    assert.equal(inbox.envelope.state, "created");
    assert.ok(inbox.expiresAt.getTime() > Date.now());
    const expecting = inbox.expectMessage({ subjectContains: "code", timeoutS: 20 });
    await send(inbox.address, "Your code", "Your sign-up code is 482913.");
    const mail = await expecting;
    assert.equal(mail.code, "482913");
    assert.equal(mail.subject, "Your code");
    assert.equal(mail.fromName, "App");
    assert.deepEqual(mail.to, [inbox.address]);
    assert.equal(mail.claimed, true);
    assert.equal(inbox.envelope.next_action, "proceed");
    const again = await mail.claim();
    assert.equal(again.reason, "already_claimed");
  });

  it("refuses another run's claim and read with AlreadyClaimedByOther and WrongRun", async () => {
    const inbox = await sink.createInbox({ runId: runId("owner"), purpose: "signup" });
    await send(inbox.address, "Your code", "Code 111222");
    const mail = await inbox.expectMessage({ timeoutS: 20 });
    await assert.rejects(sink.claim(mail.messageId, runId("thief")), (error: unknown) => {
      assert.ok(error instanceof AlreadyClaimedByOther);
      assert.equal(error.nextAction, "stop");
      assert.match(error.message, /reason=claimed_by_other_run, next_action=stop/);
      assert.match(error.message, /hint: /);
      return true;
    });
    await assert.rejects(sink.readMessage(mail.messageId, { runId: runId("thief") }), WrongRun);
    await assert.rejects(
      sink.waitForMessage(inbox.inboxId, { runId: runId("thief"), timeoutS: 0 }),
      WrongRun,
    );
  });

  it("rejects with EvidenceNotFound at timeoutS, saying the reason, the next action and the hint", async () => {
    const inbox = await sink.createInbox({ runId: runId("silent"), purpose: "signup" });
    await assert.rejects(
      inbox.expectMessage({ subjectContains: "code", timeoutS: 1.5 }),
      (error: unknown) => {
        assert.ok(error instanceof EvidenceNotFound);
        assert.equal(error.deadlineExceeded, true);
        assert.equal(error.reason, "evidence_not_found");
        assert.equal(error.envelope?.inbox_id, inbox.inboxId);
        assert.match(error.message, /reason=evidence_not_found, next_action=wait_for_message/);
        assert.match(error.message, /\n {2}next: wait again/);
        assert.match(error.message, /\n {2}hint: \S/);
        return true;
      },
    );
  });

  it("rejects a spent budget with BudgetSpent and never creates another inbox", async () => {
    const run = runId("budget");
    const inbox = await sink.createInbox({ runId: run, purpose: "signup", pollBudget: 1 });
    await assert.rejects(inbox.expectMessage({ longPollS: 1, timeoutS: 30 }), (error: unknown) => {
      assert.ok(error instanceof BudgetSpent);
      assert.ok(["create_new_inbox", "stop"].includes(String(error.nextAction)));
      return true;
    });
    const report = await sink.runReport(run);
    assert.equal(report.inboxes.length, 1);
    assert.equal(report.inboxes[0]?.reason, "timeout");
  });

  it("rides out provider errors and the open circuit breaker, then finds the mail", async () => {
    const run = runId("breaker");
    const inbox = await sink.createInbox({ runId: run, purpose: "signup" });
    await fault({ target: "wait", mode: "error", count: 3, run_id: run });
    await send(inbox.address, "Your code", "Code 333444");
    const mail = await inbox.expectMessage({ timeoutS: 40, longPollS: 2 });
    assert.equal(mail.code, "333444");
    const types = (await sink.runReport(run)).events.map((e) => e.type);
    assert.ok(types.includes("breaker_opened"), types.join(","));
  });

  it("rejects with CircuitOpen when the deadline comes while the breaker is open", async () => {
    const run = runId("open");
    const inbox = await sink.createInbox({ runId: run, purpose: "signup" });
    await fault({ target: "wait", mode: "error", count: 3, run_id: run });
    for (let failures = 0; failures < 3; failures += 1) {
      const answer = await inbox.waitForMessage({ timeoutS: 0 });
      assert.equal(answer.reason, "provider_error");
    }
    await assert.rejects(inbox.expectMessage({ timeoutS: 2, longPollS: 1 }), (error: unknown) => {
      assert.ok(error instanceof CircuitOpen, String(error));
      assert.equal(error.nextAction, "wait_then_retry");
      assert.ok((error.retryAfter ?? 0) > 0);
      return true;
    });
  });

  it("retries a read answered 503 with Retry-After", async () => {
    const run = runId("read503");
    const inbox = await sink.createInbox({ runId: run, purpose: "signup" });
    await send(inbox.address, "Your code", "Code 555666");
    await fault({ target: "read", mode: "error", count: 1, run_id: run });
    const mail = await inbox.expectMessage({ timeoutS: 20 });
    assert.equal(mail.code, "555666");
  });

  it("expectNoMessage resolves when nothing matching arrives and rejects with the mail that did", async () => {
    const inbox = await sink.createInbox({ runId: runId("quiet"), purpose: "reset" });
    await send(inbox.address, "Welcome", "Hello");
    await inbox.expectNoMessage({ subjectContains: "reset", forS: 1 });
    await send(inbox.address, "Password reset", "Reset link");
    await assert.rejects(inbox.expectNoMessage({ subjectContains: "reset", forS: 5 }), (error: unknown) => {
      assert.ok(error instanceof UnexpectedMessage);
      assert.equal((error.unexpected as { subject: string }).subject, "Password reset");
      return true;
    });
  });

  it("searches, mints a run token, reports and releases a run", async () => {
    const run = runId("misc");
    const inbox = await sink.createInbox({ runId: run, purpose: "signup" });
    await send(inbox.address, "Searchable subject", "Body");
    await inbox.expectMessage({ timeoutS: 20, claim: false });
    const found = await sink.search(`run:${run}`);
    assert.equal(found.messages.length, 1);
    assert.equal(found.messages[0]?.subject, "Searchable subject");
    const token = await sink.mintRunToken(run);
    assert.equal(token.run_id, run);
    assert.ok(token.token.length > 16);
    const scoped = new Sink({ url: server.url, token: token.token });
    assert.equal((await scoped.getInbox(inbox.inboxId)).run_id, run);
    await sink.releaseRun(run);
    await assert.rejects(inbox.expectMessage({ timeoutS: 5 }), InboxExpired);
    const report = await sink.runReport(run);
    assert.ok(report.events.some((e) => e.type === "released"));
  });

  it("takes the newest of two resends with order: newest; the oldest answer counts newer_matching", async () => {
    const inbox = await sink.createInbox({ runId: runId("resend"), purpose: "signup" });
    assert.equal(inbox.created.next_tool, "wait_for_message");
    assert.ok(inbox.created.hint, "a v3 server says what to do after create");
    await send(inbox.address, "Your code", "Code 100001");
    await send(inbox.address, "Your code", "Code 200002");
    const oldest = await inbox.waitForMessage({ subjectContains: "code", timeoutS: 5 });
    assert.equal(oldest.next_action, "claim_message");
    assert.equal(oldest.newer_matching, 1);
    assert.equal(oldest.next_tool, "claim_message");
    const mail = await inbox.expectMessage({ subjectContains: "code", order: "newest", timeoutS: 20 });
    assert.equal(mail.code, "200002");
  });

  it("rejects an unknown inbox with NotFound", async () => {
    await assert.rejects(sink.getInbox("ib_does_not_exist"), NotFound);
  });
});
