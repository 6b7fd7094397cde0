import { test, expect } from "runsink/playwright";
for (const name of ["Ada", "Grace", "Linus", "Barbara"]) {
  test(`${name} signs up with the code mailed to their own inbox`, async ({ page, inbox }) => {
    await page.goto("/");
    await page.getByLabel("Name").fill(name);
    await page.getByLabel("Email").fill(inbox.address);
    await page.getByRole("button", { name: "Sign up" }).click();
    const mail = await inbox.expectMessage({ subjectContains: "code" });
    expect([mail.to, mail.text]).toEqual([[inbox.address], expect.stringContaining(`Hi ${name},`)]);
    await page.getByLabel("Code").fill(mail.code!);
    await page.getByRole("button", { name: "Verify" }).click();
    await expect(page.getByText("verified")).toBeVisible();
  });
}
