import { test } from "node:test";
import assert from "node:assert/strict";
import { formatPreview, parsePreview } from "../../src/previews";

test("a preview notification becomes one line", () => {
  const p = parsePreview({ uri: "file:///work/my%20code/calc.py", version: 7, position: { line: 1, character: 14 },
    step: 2, text: "pha, beta)\nz = 1", masked: 3 });
  assert.ok(p);
  assert.equal(formatPreview(p), "calc.py:2:15 v7 step 2 (masked 3) | pha, beta)⏎z = 1");
});

test("something else is not a preview", () => {
  assert.equal(parsePreview(null), undefined);
  assert.equal(parsePreview({ uri: 1, text: "x" }), undefined);
});
