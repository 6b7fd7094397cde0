import { defineConfig } from "@playwright/test";

// A test that fails on purpose, to show the run report it carries:
//   npx playwright test -c playwright.failing.config.ts
// No globalSetup and no app: each worker's `runsink` fixture starts its own `runsink serve`.
// The inbox's expectMessage gives up 1 s before this timeout, with runsink's reason and hint.
export default defineConfig({ testDir: "failing", timeout: 6_000 });
