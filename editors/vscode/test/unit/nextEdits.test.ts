import { test } from "node:test";
import assert from "node:assert/strict";
import { afterAccept, hint, isCurrent, NextEdit, parseEdits, rebase } from "../../src/nextEdits";

const URI = "file:///work/shapes.py";

function edit(line: number, start: number, end: number, text: string, version = 2): NextEdit {
  return { text, uri: URI, version, range: { start: { line, character: start }, end: { line, character: end } } };
}

test("the server's answer is read, malformed edits are dropped", () => {
  const answer = {
    edits: [
      { text: "r", range: { start: { line: 4, character: 17 }, end: { line: 4, character: 23 } },
        textDocument: { uri: URI, version: 2 },
        command: { title: "accept", command: "redraft.acceptEdit", arguments: [URI] } },
      { text: "r", range: { start: { line: 5, character: 10 } }, textDocument: { uri: URI, version: 2 } },
      { text: 1, range: { start: { line: 5, character: 10 }, end: { line: 5, character: 16 } },
        textDocument: { uri: URI, version: 2 } },
      { text: "r", range: { start: { line: 5, character: 16 }, end: { line: 5, character: 10 } },
        textDocument: { uri: URI, version: 2 } },
      { text: "r", range: { start: { line: 5, character: 10 }, end: { line: 5, character: 16 } },
        textDocument: { uri: URI } },
    ],
  };
  const edits = parseEdits(answer);
  assert.equal(edits.length, 1);
  assert.deepEqual(edits[0], { ...edit(4, 17, 23, "r"),
    command: { title: "accept", command: "redraft.acceptEdit", arguments: [URI] } });
  assert.deepEqual(parseEdits(null), []);
  assert.deepEqual(parseEdits({ edits: "none" }), []);
});

test("an edit applies only to its document and version, inside the document", () => {
  const e = edit(4, 17, 23, "r");
  assert.equal(isCurrent(e, URI, 2), true);
  assert.equal(isCurrent(e, URI, 3), false);
  assert.equal(isCurrent(e, "file:///work/other.py", 2), false);
  assert.equal(isCurrent(e, URI, 2, 5), true);
  assert.equal(isCurrent(e, URI, 2, 4), false);
});

test("after one use is renamed, the others on its line shift and the rest stay", () => {
  // `    base = math.pi * radius * radius` with both uses proposed, and one on the next line
  const first = edit(4, 21, 27, "r");
  const second = edit(4, 30, 36, "r");
  const below = edit(5, 10, 16, "r");
  const rest = rebase([second, below], first, 3);
  assert.deepEqual(rest, [edit(4, 25, 31, "r", 3), edit(5, 10, 16, "r", 3)]);
});

test("edits before the applied one, or on other lines, do not move; overlapping ones go", () => {
  const applied = edit(4, 21, 27, "r");
  const before = edit(4, 2, 8, "r");
  const overlapping = edit(4, 25, 30, "x");
  assert.deepEqual(rebase([before, overlapping, applied], applied, 3), [edit(4, 2, 8, "r", 3)]);
});

test("an applied edit that changes the line count drops the rest", () => {
  assert.deepEqual(rebase([edit(6, 0, 1, "y")], edit(4, 0, 1, "a\nb"), 3), []);
  const joinsLines: NextEdit = { ...edit(4, 0, 0, "x"), range: { start: { line: 4, character: 3 }, end: { line: 5, character: 0 } } };
  assert.deepEqual(rebase([edit(6, 0, 1, "y")], joinsLines, 3), []);
});

test("the cursor lands after the accepted text", () => {
  assert.deepEqual(afterAccept(edit(4, 21, 27, "r")), { line: 4, character: 22 });
  assert.deepEqual(afterAccept(edit(4, 21, 27, "ab\ncd")), { line: 5, character: 2 });
});

test("the hint says jump from elsewhere and accept on the line", () => {
  const e = edit(4, 21, 27, "r");
  assert.equal(hint(e, 1, 0), "→ r · Tab to jump, Tab to accept · Escape dismisses");
  assert.equal(hint(e, 4, 0), "→ r · Tab to accept · Escape dismisses");
  assert.doesNotMatch(hint(e, 4, 0), /jump/);
  assert.match(hint(e, 4, 2), / · 2 more$/);
  assert.match(hint(edit(4, 21, 27, ""), 1, 0), /delete/);
});
