import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  BudgetSpent,
  CircuitOpen,
  EvidenceMismatch,
  EvidenceNotFound,
  InboxExpired,
  ProviderError,
  RunsinkError,
  TransportError,
  WrongRun,
} from "../../dist/errors.js";
import { Expectation } from "../../dist/expect.js";
import { claimed, envelope, expired, received } from "../envelopes.js";

const plan = (timeoutS = 30, longPollS = 10) =>
  new Expectation({
    inboxId: "ib_1",
    runId: "run-1",
    address: "abc123@sink.test",
    match: { subject_contains: "code" },
    timeoutS,
    longPollS,
    started: 100,
  });

function rejection(run: () => unknown): RunsinkError {
  try {
    run();
  } catch (error) {
    assert.ok(error instanceof RunsinkError, `not a RunsinkError: ${String(error)}`);
    return error;
  }
  assert.fail("expected a rejection");
}

describe("Expectation", () => {
  it("finds the message of a received answer, and of a proceed answer", () => {
    assert.deepEqual(plan().afterWait(received(), 101), { kind: "found", messageId: "m_1" });
    assert.deepEqual(plan().afterWait(claimed(), 101), { kind: "found", messageId: "m_1" });
  });

  it("waits again after evidence_not_found and verify_trigger, after retry_after", () => {
    assert.deepEqual(plan().afterWait(envelope(), 101), { kind: "pause", delayS: 0 });
    const mismatch = envelope({ next_action: "verify_trigger", reason: "evidence_mismatch", retry_after: 2 });
    const p = plan();
    assert.deepEqual(p.afterWait(mismatch, 101), { kind: "pause", delayS: 2 });
    assert.equal(p.mismatch, true);
  });

  it("pauses retry_after on too_early and circuit_open (blocked, wait_then_retry)", () => {
    const open = envelope({
      status: "blocked",
      next_action: "wait_then_retry",
      reason: "circuit_open",
      retry_after: 4.5,
    });
    assert.deepEqual(plan().afterWait(open, 101), { kind: "pause", delayS: 4.5 });
  });

  it("rejects create_new_inbox with InboxExpired, never another inbox", () => {
    const error = rejection(() => plan().afterWait(expired("lease", "create_new_inbox"), 101));
    assert.ok(error instanceof InboxExpired);
    assert.equal(error.reason, "lease");
    assert.equal(error.nextAction, "create_new_inbox");
    assert.match(error.message, /reason=lease, next_action=create_new_inbox/);
    assert.match(error.message, /next: the policy allows another inbox/);
    assert.match(error.message, /hint: /);
  });

  it("rejects a spent budget with BudgetSpent (an InboxExpired) and says stop", () => {
    const error = rejection(() => plan().afterWait(expired("timeout", "stop"), 101));
    assert.ok(error instanceof BudgetSpent);
    assert.ok(error instanceof InboxExpired);
    assert.equal(error.nextAction, "stop");
    assert.match(error.message, /the poll budget was spent/);
  });

  it("carries the server's v3 hint and next_tool into the error", () => {
    const answer = expired("timeout", "create_new_inbox", {
      hint: "No mail reached abc123@sink.test in 12 polls: fix the trigger before creating another inbox.",
      next_tool: "create_inbox",
      next_arguments: { run_id: "run-1", purpose: "signup" },
    });
    const error = rejection(() => plan().afterWait(answer, 101));
    assert.equal(error.hint, answer.hint);
    assert.equal(error.nextTool, "create_inbox");
    assert.deepEqual(error.nextArguments, { run_id: "run-1", purpose: "signup" });
    assert.ok(error.message.includes(`hint: ${answer.hint}`));
  });

  it("rejects blocked without retry_after: it must not be repeated", () => {
    const blocked = envelope({
      status: "blocked",
      next_action: "wait_then_retry",
      reason: "circuit_open",
      retry_after: null,
    });
    assert.ok(rejection(() => plan().afterWait(blocked, 101)) instanceof CircuitOpen);
  });

  it("rejects at the deadline instead of sleeping past it, with the last reason's class", () => {
    const open = envelope({
      status: "blocked",
      next_action: "wait_then_retry",
      reason: "circuit_open",
      retry_after: 5,
    });
    const error = rejection(() => plan(10).afterWait(open, 106));
    assert.ok(error instanceof CircuitOpen);
    assert.equal(error.deadlineExceeded, true);
    assert.match(error.message, /gave up after timeoutS=10/);
    const nothing = rejection(() => plan(10).afterWait(envelope({ retry_after: 1 }), 110));
    assert.ok(nothing instanceof EvidenceNotFound);
  });

  it("says mail arrived but did not match when the last answer was only evidence_not_found", () => {
    const p = plan(10);
    p.afterWait(envelope({ next_action: "verify_trigger", reason: "evidence_mismatch" }), 101);
    const error = rejection(() => p.afterWait(envelope({ retry_after: 1 }), 110));
    assert.equal(error.mismatch, true);
    assert.match(error.message, /none matched the criteria/);
    const last = rejection(() =>
      plan(1).afterWait(
        envelope({ reason: "evidence_mismatch", next_action: "verify_trigger", retry_after: 2 }),
        100,
      ),
    );
    assert.ok(last instanceof EvidenceMismatch);
  });

  it("follows next_tool wait_for_message for a next_action it does not know", () => {
    const future = envelope({
      next_action: "wait_for_resend",
      next_tool: "wait_for_message",
      retry_after: 1,
    });
    assert.deepEqual(plan().afterWait(future, 101), { kind: "pause", delayS: 1 });
    const unknownStop = envelope({
      next_action: "call_a_human",
      next_tool: null,
      reason: null,
      status: "blocked",
    });
    assert.ok(rejection(() => plan().afterWait(unknownStop, 101)) instanceof RunsinkError);
  });

  it("treats an expired inbox whose message was claimed as terminal, and says so", () => {
    const error = rejection(() =>
      plan().afterWait(claimed({ state: "expired", reason: "lease", next_action: "proceed" }), 101),
    );
    assert.ok(error instanceof InboxExpired);
    assert.match(error.message, /was claimed; no new message can arrive here/);
  });

  it("completes a claim on proceed and pauses on wait_then_retry", () => {
    assert.deepEqual(plan().afterClaim(claimed(), 101), { kind: "claimed", messageId: "m_1" });
    const trouble = received({
      status: "retryable",
      next_action: "wait_then_retry",
      reason: "provider_error",
      retry_after: 1,
    });
    assert.deepEqual(plan().afterClaim(trouble, 101), { kind: "pause", delayS: 1 });
  });

  it("retries an error answer that says wait_then_retry after its Retry-After, within the deadline", () => {
    const trouble = new ProviderError("503", {
      reason: "provider_error",
      nextAction: "wait_then_retry",
      retryAfter: 2,
      httpStatus: 503,
    });
    assert.deepEqual(plan(30).afterError(trouble, 101), { kind: "pause", delayS: 2 });
    const late = rejection(() => plan(2).afterError(trouble, 101, "m_1"));
    assert.ok(late instanceof ProviderError);
    assert.equal(late.deadlineExceeded, true);
    assert.match(late.message, /message m_1 .* was found but could not be read or claimed/);
  });

  it("rethrows a refusal of the run with the same class and the expectation's context", () => {
    const refusal = new WrongRun("403", {
      reason: "wrong_run",
      nextAction: "stop",
      hint: "Use the run_id the inbox was created with.",
    });
    const error = rejection(() => plan().afterError(refusal, 101));
    assert.ok(error instanceof WrongRun);
    assert.match(
      error.message,
      /^no message matching subject_contains="code" in inbox ib_1 <abc123@sink.test> \(run run-1\): reason=wrong_run, next_action=stop/,
    );
    assert.match(error.message, /hint: Use the run_id/);
  });

  it("bounds each long-poll by longPollS and by the deadline", () => {
    const p = plan(25, 10);
    assert.equal(p.waitTimeout(100), 10);
    assert.equal(p.waitTimeout(119.5), 5.5);
    assert.equal(p.waitTimeout(130), 0);
  });
});

describe("Expectation and a server that does not answer", () => {
  it("rejects a TransportError at once instead of retrying until the deadline", () => {
    const down = new TransportError("POST /v1/inboxes/ib_1/wait: no answer from the runsink server");
    const error = rejection(() => plan(600).afterError(down, 101));
    assert.ok(error instanceof TransportError);
    assert.match(error.message, /no answer from the runsink server/);
  });
});
