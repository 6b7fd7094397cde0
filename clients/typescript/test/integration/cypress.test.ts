import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { runsinkTasks, type RunsinkTasks } from "../../dist/cypress.js";
import type { RunsinkServer } from "../../dist/index.js";
import { startTestServer } from "../server.js";
import { sendMail } from "../smtp.js";

let server: RunsinkServer;
let tasks: RunsinkTasks;

before(async () => {
  server = await startTestServer();
  tasks = runsinkTasks({ url: server.url });
});
after(async () => {
  await server?.stop();
});

/** cy.task sends arguments and results through JSON: a task must survive the round trip. */
const overJson = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

describe("the Cypress task functions (runsink/cypress)", () => {
  it("create an inbox, expect its mail as plain JSON, report and release the run", async () => {
    const inbox = overJson(
      await tasks["runsink:createInbox"]({ name: "signup spec > sends a code", purpose: "signup" }),
    );
    assert.match(inbox.runId, /^signup-spec-sends-a-code\.[0-9a-f]{10}$/);
    await sendMail(server.smtpHost, server.smtpPort, {
      to: inbox.address,
      subject: "Your code",
      text: "Code 778899",
    });
    const mail = await tasks["runsink:expectMessage"](
      overJson({ inbox, subjectContains: "code", timeoutS: 20 }),
    );
    assert.deepEqual(overJson(mail), mail);
    assert.equal(mail.code, "778899");
    assert.equal(mail.subject, "Your code");
    assert.equal(await tasks["runsink:expectNoMessage"]({ inbox, subjectContains: "code", forS: 1 }), null);
    const report = await tasks["runsink:runReport"]({ runId: inbox.runId });
    assert.match(report.summary, /claimed/);
    assert.equal(await tasks["runsink:releaseRun"]({ runId: inbox.runId }), null);
  });

  it("reject with the client's error text: reason, next action and hint", async () => {
    const inbox = await tasks["runsink:createInbox"](null);
    await assert.rejects(tasks["runsink:expectMessage"]({ inbox, timeoutS: 1 }), (error: unknown) => {
      assert.ok(error instanceof Error);
      assert.match(error.message, /reason=evidence_not_found, next_action=wait_for_message/);
      assert.match(error.message, /hint: \S/);
      return true;
    });
  });
});
