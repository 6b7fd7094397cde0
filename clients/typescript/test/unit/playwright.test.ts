import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { TestInfo } from "@playwright/test";
import { isRunId } from "../../dist/index.js";
import { fromEnvironment, runIdForTest } from "../../dist/playwright.js";

const info = (overrides: Partial<TestInfo>): TestInfo =>
  ({
    titlePath: ["signup.spec.ts", "Signup", "mails a code"],
    testId: "abc123",
    retry: 0,
    repeatEachIndex: 0,
    ...overrides,
  }) as TestInfo;

describe("runsink/playwright", () => {
  it("gives each test, retry and repeat its own valid run id, readable from its title", () => {
    const ids = [
      runIdForTest(info({}), "salt"),
      runIdForTest(info({ retry: 1 }), "salt"),
      runIdForTest(info({ repeatEachIndex: 1 }), "salt"),
      runIdForTest(info({ testId: "def456" }), "salt"),
      runIdForTest(info({}), "other-worker-salt"),
    ];
    assert.equal(new Set(ids).size, ids.length);
    for (const id of ids) assert.ok(isRunId(id), id);
    assert.match(ids[0] ?? "", /^signup\.spec\.ts-Signup-mails-a-code\.[0-9a-f]{10}$/);
    assert.match(ids[1] ?? "", /-retry1\.[0-9a-f]{10}$/);
  });

  it("cuts a long title to 128 characters, keeping its end", () => {
    const id = runIdForTest(info({ titlePath: ["a".repeat(300), "the end of the title"] }), "salt");
    assert.ok(id.length <= 128 && isRunId(id));
    assert.match(id, /the-end-of-the-title\.[0-9a-f]{10}$/);
  });

  it("reads RUNSINK_URL, RUNSINK_SMTP_HOST and RUNSINK_SMTP_PORT, and refuses bad values clearly", () => {
    assert.equal(fromEnvironment({}), null);
    assert.deepEqual(fromEnvironment({ RUNSINK_URL: "http://sink.internal:8025/" }), {
      url: "http://sink.internal:8025",
      smtpHost: "sink.internal",
      smtpPort: 1025,
    });
    assert.deepEqual(
      fromEnvironment({
        RUNSINK_URL: "http://127.0.0.1:9000",
        RUNSINK_SMTP_HOST: "mail",
        RUNSINK_SMTP_PORT: "2525",
      }),
      { url: "http://127.0.0.1:9000", smtpHost: "mail", smtpPort: 2525 },
    );
    assert.throws(
      () => fromEnvironment({ RUNSINK_URL: "sink:8025" }),
      /RUNSINK_URL: expected http\(s\):\/\/host:port/,
    );
    assert.throws(
      () => fromEnvironment({ RUNSINK_URL: "http://x", RUNSINK_SMTP_PORT: "70000" }),
      /RUNSINK_SMTP_PORT/,
    );
  });
});
