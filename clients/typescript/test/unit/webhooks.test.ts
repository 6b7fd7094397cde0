import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { Webhook } from "standardwebhooks";
import { RunsinkError } from "../../dist/errors.js";
import { WebhookVerificationError, secretKey, verifyWebhook } from "../../dist/webhooks.js";

// The Standard Webhooks libraries' shared test vector (libraries/*/tests: "sign function").
const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ID = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const TIME = 1614265330;
const BODY = '{"test": 2432232314}';
const SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
const WRONG = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=";

function vector(signature = SIGNATURE): Record<string, string> {
  return { "webhook-id": ID, "webhook-timestamp": String(TIME), "webhook-signature": signature };
}

function refused(run: () => unknown, says: RegExp): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof WebhookVerificationError, String(error));
    assert.ok(error instanceof RunsinkError);
    assert.match(error.message, says);
    return true;
  });
}

const newSecret = (): string => `whsec_${randomBytes(32).toString("base64")}`;

describe("verifyWebhook", () => {
  it("accepts the Standard Webhooks test vector, the secret prefixed or bare", () => {
    for (const secret of [SECRET, SECRET.slice("whsec_".length), ` ${SECRET}\n`]) {
      verifyWebhook(secret, vector(), BODY, { nowS: TIME });
    }
    verifyWebhook(SECRET, vector(), Buffer.from(BODY), { nowS: TIME });
  });

  it("verifies what the reference standardwebhooks package signs, and returns the event", () => {
    const secret = newSecret();
    const body = JSON.stringify({ type: "inbox", id: "ev_1", timestamp: "t", data: { run_id: "r" } });
    const now = new Date();
    const headers = new Headers({
      "Webhook-Id": "ev_1",
      "Webhook-Timestamp": String(Math.floor(now.getTime() / 1000)),
      "Webhook-Signature": new Webhook(secret).sign("ev_1", now, body),
    });
    const event = verifyWebhook(secret, headers, body);
    assert.deepEqual(event, { type: "inbox", id: "ev_1", timestamp: "t", data: { run_id: "r" } });
  });

  it("agrees with the reference verifier on the test vector", () => {
    const reference = new Webhook(SECRET);
    const nowS = Math.floor(Date.now() / 1000);
    const signed = vector(reference.sign(ID, new Date(nowS * 1000), BODY));
    signed["webhook-timestamp"] = String(nowS);
    assert.deepEqual(reference.verify(BODY, signed), JSON.parse(BODY));
    assert.equal(reference.sign(ID, new Date(TIME * 1000), BODY), SIGNATURE);
  });

  it("passes when one v1 entry of several matches, and reads header names in any case", () => {
    const header = `${WRONG} v2,${SIGNATURE.slice(3)} v1a,bm90 ${SIGNATURE}  ${WRONG}`;
    const headers = { "WEBHOOK-ID": ID, "webhook-timestamp": [String(TIME)], "Webhook-Signature": header };
    verifyWebhook(SECRET, headers, BODY, { nowS: TIME });
  });

  it("refuses a wrong MAC, a right one under another version, a changed body or another secret", () => {
    for (const signature of [WRONG, `v2,${SIGNATURE.slice(3)}`, SIGNATURE.slice(3), "v1,not*base64"]) {
      refused(() => verifyWebhook(SECRET, vector(signature), BODY, { nowS: TIME }), /no v1 signature/);
    }
    refused(() => verifyWebhook(SECRET, vector(), `${BODY} `, { nowS: TIME }), /raw bytes received/);
    refused(() => verifyWebhook(newSecret(), vector(), BODY, { nowS: TIME }), /this webhook's/);
  });

  it("names a missing header", () => {
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
      const headers = vector();
      delete headers[name];
      const says = new RegExp(`missing ${name} header`);
      refused(() => verifyWebhook(SECRET, headers, BODY, { nowS: TIME }), says);
    }
  });

  it("refuses a timestamp more than 300 s from now either way, and accepts exactly 300 s", () => {
    refused(() => verifyWebhook(SECRET, vector(), BODY, { nowS: TIME + 301 }), /301 s in the past/);
    refused(() => verifyWebhook(SECRET, vector(), BODY, { nowS: TIME - 301 }), /301 s in the future/);
    verifyWebhook(SECRET, vector(), BODY, { nowS: TIME + 300 });
    verifyWebhook(SECRET, vector(), BODY, { nowS: TIME - 300 });
    verifyWebhook(SECRET, vector(), BODY, { nowS: TIME + 301, toleranceS: 302 });
  });

  it("refuses a timestamp that is not whole Unix seconds", () => {
    for (const stamp of ["hello", "1614265330.5", "-1614265330", "\uff11\uff16"]) {
      const headers = { ...vector(), "webhook-timestamp": stamp };
      refused(() => verifyWebhook(SECRET, headers, BODY, { nowS: TIME }), /not Unix seconds/);
    }
  });

  it("throws a TypeError for a secret that is not one", () => {
    for (const secret of ["", "whsec_", "whsec_***"]) {
      assert.throws(() => verifyWebhook(secret, vector(), BODY, { nowS: TIME }), TypeError);
    }
    const padded = Buffer.from("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS=", "base64");
    assert.deepEqual(secretKey("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS"), padded);
  });
});
