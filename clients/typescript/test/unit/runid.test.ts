import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RUN_ID_MAX, isRunId, runIdFor } from "../../dist/runid.js";

describe("runIdFor", () => {
  it("cleans a test's name into the run_id alphabet and ends it with a hash", () => {
    const id = runIdFor("signup.spec.ts Sign up > sends a code (ünïcode) #1", "salt", 1);
    assert.ok(isRunId(id), id);
    assert.match(id, /^signup\.spec\.ts-Sign-up-sends-a-code-n-code-1\.[0-9a-f]{10}$/);
  });

  it("keeps the end of a long name within 128 characters", () => {
    const id = runIdFor(`${"a/".repeat(200)}the test's own title`, "salt", 1);
    assert.equal(id.length <= RUN_ID_MAX, true);
    assert.ok(isRunId(id));
    assert.match(id, /the-test-s-own-title\.[0-9a-f]{10}$/);
  });

  it("gives names that clean alike, other salts and other retries their own ids", () => {
    const ids = new Set([
      runIdFor("a b", "s", 1),
      runIdFor("a-b", "s", 1),
      runIdFor("a b", "t", 1),
      runIdFor("a b", "s", 2),
    ]);
    assert.equal(ids.size, 4);
  });

  it("matches the pytest plugin's run_id_for for the same input", () => {
    // sink/pytest_plugin.py: run_id_for("tests/test_x.py::test_y[a b]", "0123", 1)
    assert.equal(
      runIdFor("tests/test_x.py::test_y[a b]", "0123", 1),
      "tests-test_x.py::test_y-a-b.542b5d8123",
    );
  });

  it("is only a hash for a name with nothing readable", () => {
    assert.match(runIdFor("???", "s", 1), /^[0-9a-f]{10}$/);
  });
});
