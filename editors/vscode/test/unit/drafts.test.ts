import { test } from "node:test";
import assert from "node:assert/strict";
import { formatDraft, parseDraft } from "../../src/drafts";

test("a draft notification becomes one line", () => {
  const d = parseDraft({ uri: "file:///work/my%20code/calc.py", version: 7, position: { line: 1, character: 14 },
    step: 2, text: "pha, beta)\nz = 1", masked: 3 });
  assert.ok(d);
  assert.equal(formatDraft(d), "calc.py:2:15 v7 step 2 (masked 3) | pha, beta)⏎z = 1");
});

test("something else is not a draft", () => {
  assert.equal(parseDraft(null), undefined);
  assert.equal(parseDraft({ uri: 1, text: "x" }), undefined);
});
