import { test } from "runsink/playwright";

// Fails on purpose: nothing mails this inbox, so expectMessage rejects with EvidenceNotFound 1 s
// before the test's timeout (reason, next action and hint in its message), and the test carries
// the runsink-run-report attachment.
test("a code that is never sent", async ({ inbox }) => {
  await inbox.expectMessage({ subjectContains: "code" });
});
