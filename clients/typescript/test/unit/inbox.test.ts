import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  BudgetSpent,
  EvidenceNotFound,
  ProviderError,
  RunsinkError,
  UnexpectedMessage,
} from "../../dist/errors.js";
import { Inbox, type Clock, type InboxApi } from "../../dist/inbox.js";
import { Message } from "../../dist/message.js";
import type { EnvelopeJson, MessageJson } from "../../dist/types.js";
import { claimed, envelope, expired, received } from "../envelopes.js";

/** A fake clock: sleeping moves time at once, and every pause is recorded. */
class FakeClock implements Clock {
  t = 0;
  pauses: number[] = [];
  now(): number {
    return this.t;
  }
  wallMs(): number {
    return Date.parse("2026-10-21T02:20:00.000Z") + this.t * 1000;
  }
  async sleep(seconds: number): Promise<void> {
    this.pauses.push(seconds);
    this.t += seconds;
  }
}

type Scripted = EnvelopeJson | RunsinkError;

/**
 * The edge of the world for the loop: answers scripted per call, as the server's HTTP would give
 * them. (The real server is exercised by the integration tests; this fixes the loop's order.)
 */
class ScriptedApi implements InboxApi {
  readonly clock = new FakeClock();
  calls: string[] = [];
  waitBodies: unknown[] = [];
  constructor(
    private waits: Scripted[],
    private claims: Scripted[] = [],
    private reads: (MessageJson | RunsinkError)[] = [],
  ) {}
  private next<T>(list: (T | RunsinkError)[], what: string): T {
    const item = list.shift();
    if (item === undefined) throw new Error(`no scripted answer left for ${what}`);
    if (item instanceof RunsinkError) throw item;
    return item;
  }
  async waitForMessage(_inboxId: string, options: { timeoutS?: number }): Promise<EnvelopeJson> {
    this.calls.push("wait");
    this.waitBodies.push(options);
    const answer = this.next(this.waits, "wait");
    // The server holds a wait that finds nothing for its whole timeout (a long-poll).
    if (answer.message === null && answer.state !== "expired") this.clock.t += options.timeoutS ?? 0;
    return answer;
  }
  async getInbox(): Promise<EnvelopeJson> {
    this.calls.push("get");
    return envelope();
  }
  async claim(): Promise<EnvelopeJson> {
    this.calls.push("claim");
    return this.next(this.claims, "claim");
  }
  async readMessage(messageId: string, options: { runId?: string } = {}): Promise<Message> {
    this.calls.push("read");
    const json = this.next(this.reads, "read");
    return new Message({ ...json, message_id: messageId }, options.runId ?? null, this);
  }
  async listMessages(): Promise<never> {
    throw new Error("not used");
  }
  async runReport(): Promise<never> {
    throw new Error("not used");
  }
  async releaseRun(): Promise<void> {}
}

const messageJson = (): MessageJson => ({
  message_id: "m_1",
  inbox_id: "ib_1",
  headers: {},
  from: "app@example.test",
  from_name: "App",
  to: ["abc123@sink.test"],
  cc: [],
  subject: "Your code",
  date: null,
  text: "Your code is 482913",
  html: null,
  attachments: [],
  links: [],
  codes: ["482913"],
  parse_warnings: [],
  envelope: { mail_from: "app@example.test", rcpt_to: ["abc123@sink.test"] },
  size: 100,
  claimed: true,
  received_at: "2026-10-21T02:00:00.000Z",
  released_at: null,
});

const unavailable = (retryAfter: number) =>
  new ProviderError("503 provider_error", {
    reason: "provider_error",
    nextAction: "wait_then_retry",
    retryAfter,
    httpStatus: 503,
  });

const created = () => ({ ...envelope({ state: "created", status: "completed", reason: null }), capped: [] });

describe("Inbox.expectMessage", () => {
  it("waits, claims and reads, riding out a 503 with Retry-After on the wait and on the read", async () => {
    const api = new ScriptedApi(
      [unavailable(2), envelope(), received()],
      [claimed()],
      [unavailable(1), messageJson()],
    );
    const inbox = new Inbox(api, created());
    const mail = await inbox.expectMessage({ subjectContains: "code", timeoutS: 60 });
    assert.equal(mail.code, "482913");
    assert.equal(mail.messageId, "m_1");
    assert.deepEqual(api.calls, ["wait", "wait", "wait", "claim", "read", "read"]);
    assert.deepEqual(api.clock.pauses, [2, 0, 1]);
    assert.deepEqual(api.waitBodies[0], {
      subjectContains: "code",
      fromContains: undefined,
      bodyContains: undefined,
      maxAgeS: undefined,
      order: undefined,
      timeoutS: 30,
      runId: "run-1",
    });
  });

  it("rejects create_new_inbox without creating anything (the loop has no create)", async () => {
    const api = new ScriptedApi([envelope(), expired("timeout", "create_new_inbox")]);
    const inbox = new Inbox(api, created());
    await assert.rejects(inbox.expectMessage({ timeoutS: 60 }), (error: unknown) => {
      assert.ok(error instanceof BudgetSpent);
      assert.equal(error.nextAction, "create_new_inbox");
      return true;
    });
    assert.deepEqual(api.calls, ["wait", "wait"]);
  });

  it("defaults the deadline to the lease end: it rejects there while the server still says retry", async () => {
    // created expires 02:30; the fake wall clock starts at 02:20: 600 s + 5 s of slack.
    const waits = Array.from({ length: 200 }, () => envelope({ retry_after: 10 }));
    const api = new ScriptedApi(waits);
    const inbox = new Inbox(api, created());
    await assert.rejects(inbox.expectMessage(), (error: unknown) => {
      assert.ok(error instanceof RunsinkError && error.deadlineExceeded);
      return true;
    });
    assert.ok(api.clock.t <= 605 && api.clock.t >= 590, String(api.clock.t));
  });

  it("gives up at inbox.deadline when it comes before the lease end", async () => {
    const api = new ScriptedApi(Array.from({ length: 20 }, () => envelope()));
    const inbox = new Inbox(api, created());
    inbox.deadline = new Date(api.clock.wallMs() + 20_000);
    await assert.rejects(inbox.expectMessage(), (error: unknown) => {
      assert.ok(error instanceof EvidenceNotFound && error.deadlineExceeded);
      assert.match(error.message, /gave up after timeoutS=20/);
      return true;
    });
    assert.equal(api.clock.t, 20);
  });

  it("skips the claim with claim: false", async () => {
    const api = new ScriptedApi([received()], [], [messageJson()]);
    await new Inbox(api, created()).expectMessage({ claim: false, timeoutS: 5 });
    assert.deepEqual(api.calls, ["wait", "read"]);
  });
});

describe("Inbox.expectNoMessage", () => {
  it("resolves when the window passes without a match", async () => {
    const api = new ScriptedApi([envelope(), envelope()]);
    await new Inbox(api, created()).expectNoMessage({ forS: 5, longPollS: 3 });
    assert.deepEqual(api.calls, ["wait", "wait"]);
  });

  it("rejects with the mail that did arrive, read and not claimed", async () => {
    const api = new ScriptedApi([received()], [], [messageJson()]);
    await assert.rejects(new Inbox(api, created()).expectNoMessage({ forS: 5 }), (error: unknown) => {
      assert.ok(error instanceof UnexpectedMessage);
      assert.ok(error.unexpected instanceof Message);
      assert.match(error.message, /but message m_1 arrived/);
      return true;
    });
    assert.deepEqual(api.calls, ["wait", "read"]);
  });
});
