import assert from "node:assert/strict";
import { describe, it } from "node:test";
import * as errors from "../../dist/errors.js";
import { errorFromAnswer, type Answer } from "../../dist/http.js";
import { ERROR_CODES, REASONS } from "../../dist/types.js";
import { envelope } from "../envelopes.js";

// The contract's own words (CONTRACT.md: the envelope's reasons, the error codes, v3 additions).
const CONTRACT_REASONS = [
  "evidence_not_found",
  "evidence_mismatch",
  "evidence_misaddressed",
  "provider_timeout",
  "provider_error",
  "circuit_open",
  "too_early",
  "lease",
  "timeout",
  "claimed_by_other_run",
  "wrong_run",
  "lease_expired",
];
const CONTRACT_CODES = [
  "invalid_request",
  "invalid_cursor",
  "not_found",
  "idempotency_key_conflict",
  "policy_forbids",
  "unknown_policy",
  "evidence_released",
  "provider_timeout",
  "provider_error",
  "circuit_open",
  "over_capacity",
  "unauthorized",
  "forbidden_scope",
  "wrong_run",
  "claimed_by_other_run",
  "lease_expired",
];

function answer(status: number, body: unknown, headers: Record<string, string> = {}): Answer {
  return { status, headers: new Headers(headers), body };
}

describe("errors", () => {
  it("maps every reason and error code the contract names to its own typed class", () => {
    for (const name of [...CONTRACT_REASONS, ...CONTRACT_CODES]) {
      const Class = errors.errorClassFor(name);
      assert.notEqual(Class, errors.HttpError, `${name} has no class`);
      assert.ok(Class.prototype instanceof errors.RunsinkError, name);
    }
    for (const name of [...REASONS.filter((r) => r !== "already_claimed"), ...ERROR_CODES]) {
      assert.notEqual(errors.errorClassFor(name), errors.HttpError, name);
    }
    assert.equal(errors.errorClassFor("timeout"), errors.BudgetSpent);
    assert.equal(errors.errorClassFor("lease"), errors.InboxExpired);
    assert.equal(errors.errorClassFor("claimed_by_other_run"), errors.AlreadyClaimedByOther);
    assert.equal(errors.errorClassFor("circuit_open"), errors.CircuitOpen);
    assert.equal(errors.errorClassFor("live_evidence"), errors.LiveEvidence);
    assert.equal(errors.errorClassFor("webhook_disabled"), errors.WebhookDisabled);
    assert.equal(errors.errorClassFor("internal_error"), errors.InternalError);
    assert.ok(errors.errorClassFor("method_not_allowed").prototype instanceof errors.InvalidArguments);
    assert.equal(errors.errorClassFor("something_new"), errors.HttpError);
  });

  it("says the reason, the next action and the hint for every error code, with or without a v3 body", () => {
    for (const code of new Set([...CONTRACT_CODES, ...ERROR_CODES])) {
      const v1 = errorFromAnswer(answer(400, { error: { code, message: "bad", details: {} } }), "POST /v1/x");
      assert.equal(v1.reason, code);
      assert.match(v1.message, new RegExp(`reason=${code}, next_action=\\w+`));
      assert.match(v1.message, /\n {2}reason: /);
      assert.match(v1.message, /\n {2}next: /);
      assert.match(v1.message, /\n {2}hint: (?!\(none\))/, `${code} has no hint`);
      assert.ok(v1.hint, `${code}: .hint is empty`);
    }
  });

  it("keeps the v3 agent fields of an error body", () => {
    const body = {
      error: { code: "not_found", message: "no inbox ib_x", details: {} },
      status: "blocked",
      next_action: "stop",
      next_tool: null,
      next_arguments: null,
      hint: "Use the inbox_id returned by create_inbox.",
      retry_after: null,
      trace_id: "tr1",
    };
    const error = errorFromAnswer(answer(404, body), "GET /v1/inboxes/ib_x");
    assert.ok(error instanceof errors.NotFound);
    assert.equal(error.nextAction, "stop");
    assert.equal(error.nextTool, null);
    assert.equal(error.hint, body.hint);
    assert.equal(error.traceId, "tr1");
    assert.ok(error.message.includes("hint: Use the inbox_id returned by create_inbox."));
    assert.ok(error.message.includes("the server said: no inbox ib_x"));
  });

  it("reads an ownership refusal (reason beside the error) as WrongRun / AlreadyClaimedByOther", () => {
    const refusal = (reason: string) => ({
      status: "blocked",
      reason,
      next_action: "stop",
      retry_after: null,
      trace_id: "t",
      error: { code: reason, message: "refused", details: {} },
    });
    const wrong = errorFromAnswer(answer(403, refusal("wrong_run")), "POST claim");
    assert.ok(wrong instanceof errors.WrongRun && wrong instanceof errors.OwnershipRefused);
    assert.equal(wrong.httpStatus, 403);
    const other = errorFromAnswer(answer(409, refusal("claimed_by_other_run")), "POST claim");
    assert.ok(other instanceof errors.AlreadyClaimedByOther);
    assert.match(other.message, /another run claimed the message/);
  });

  it("takes retry_after from the Retry-After header of a 503 and says wait_then_retry", () => {
    const error = errorFromAnswer(
      answer(
        503,
        { error: { code: "provider_error", message: "store failed", details: {} } },
        { "retry-after": "3" },
      ),
      "GET /v1/messages/m_1",
    );
    assert.ok(error instanceof errors.ProviderError && error instanceof errors.Unavailable);
    assert.equal(error.retryAfter, 3);
    assert.equal(error.nextAction, "wait_then_retry");
    const cap = errorFromAnswer(answer(503, null, { "retry-after": "1" }), "POST wait");
    assert.equal(cap.nextAction, "wait_then_retry");
    assert.equal(cap.retryAfter, 1);
  });

  it("reads a claim after the lease (409 with an envelope) as LeaseExpired carrying the envelope", () => {
    const body = envelope({
      state: "expired",
      status: "blocked",
      next_action: "create_new_inbox",
      reason: "lease_expired",
    });
    const error = errorFromAnswer(answer(409, body), "POST /v1/messages/m_1/claim");
    assert.ok(error instanceof errors.LeaseExpired && error instanceof errors.InboxExpired);
    assert.deepEqual(error.envelope, body);
    assert.equal(error.nextAction, "create_new_inbox");
  });

  it("names an answer with a code it does not know HttpError with its status", () => {
    const error = errorFromAnswer(
      answer(418, { error: { code: "a_newer_code", message: "new", details: {} } }),
      "POST x",
    );
    assert.ok(error instanceof errors.HttpError);
    assert.equal(error.httpStatus, 418);
    assert.match(error.message, /^POST x: 418: reason=a_newer_code/);
  });

  it("reads a request the server refused as such (RequestRefused), not a plain HttpError", () => {
    const error = errorFromAnswer(
      answer(415, { error: { code: "unsupported_media_type", message: "json only", details: {} } }),
      "POST x",
    );
    assert.ok(error instanceof errors.RequestRefused);
    assert.equal(error.httpStatus, 415);
  });
});
