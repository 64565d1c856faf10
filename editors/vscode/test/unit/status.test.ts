import { test } from "node:test";
import assert from "node:assert/strict";
import { modelName, parseStats, statusText, statusTooltip, StatusState } from "../../src/status";

const STATS = {
  requests: 12, answered: 9, accepted: 3, edits_proposed: 2, edits_accepted: 1,
  latency_ms: { p50: 23.4, p95: 45.1, count: 9 }, model: "redraft-diffusion", model_error: null,
};

test("redraft/stats is read into the fields shown", () => {
  assert.deepEqual(parseStats(STATS), {
    model: "redraft-diffusion", modelError: null, p50: 23.4, p95: 45.1, requests: 12, answered: 9,
    accepted: 3, editsProposed: 2, editsAccepted: 1, editsLate: 0,
  });
  assert.equal(parseStats(null), undefined);
  assert.equal(parseStats({})?.p50, null);
});

test("running: the model and the last latency", () => {
  const s: StatusState = { enabled: true, server: "running", stats: parseStats(STATS), lastMs: 4.25 };
  assert.equal(statusText(s), "$(sparkle) redraft-diffusion 4.3 ms");
  assert.equal(statusText({ ...s, lastMs: 123.4 }), "$(sparkle) redraft-diffusion 123 ms");
  // nothing measured here yet: the server's p50
  assert.equal(statusText({ ...s, lastMs: null }), "$(sparkle) redraft-diffusion 23 ms");
  // no request at all yet: just the model
  assert.equal(statusText({ ...s, lastMs: null, stats: parseStats({ ...STATS, requests: 0 }) }),
    "$(sparkle) redraft-diffusion");
  const tip = statusTooltip(s);
  assert.match(tip, /p50 23 ms, p95 45 ms/);
  assert.match(tip, /9 of 12 requests answered, 3 accepted/);
  assert.match(tip, /Click to turn redraft off/);
});

test("off, starting, loading, failed", () => {
  assert.equal(statusText({ enabled: false, server: "running" }), "$(circle-slash) redraft: off");
  assert.match(statusTooltip({ enabled: false, server: "running" }), /Click to turn redraft on/);
  assert.equal(statusText({ enabled: true, server: "starting" }), "$(loading~spin) redraft");
  assert.equal(statusText({ enabled: true, server: "running", stats: parseStats({ ...STATS, model: null }) }),
    "$(loading~spin) redraft: loading model, drafts meanwhile");
  assert.match(statusTooltip({ enabled: true, server: "running", stats: parseStats({ ...STATS, model: null }) }),
    /completions come from drafts .* meanwhile/);
  assert.equal(statusText({ enabled: true, server: "failed" }), "$(error) redraft");
  const broken: StatusState = { enabled: true, server: "running", stats: parseStats({ ...STATS, model: null, model_error: "no such checkpoint" }) };
  assert.equal(statusText(broken), "$(warning) redraft");
  assert.match(statusTooltip(broken), /no such checkpoint/);
});

test("a model path shows as its folder name", () => {
  assert.equal(modelName("/home/me/models/dream-coder/"), "dream-coder");
  assert.equal(modelName("C:\\models\\llada"), "llada");
  assert.equal(modelName("redraft-diffusion"), "redraft-diffusion");
});

test("next edits judged too late: a sign in the text, the count and the setting in the tooltip", () => {
  const s: StatusState = { enabled: true, server: "running", stats: parseStats({ ...STATS, edits_late: 2 }), lastMs: 30 };
  assert.equal(statusText({ ...s, lateEdits: true }), "$(sparkle) redraft-diffusion 30 ms $(watch)");
  assert.equal(statusText(s), "$(sparkle) redraft-diffusion 30 ms");
  assert.match(statusTooltip(s), /2 proposed, 1 accepted, 2 judged too late .*nextEditTime/);
  assert.doesNotMatch(statusTooltip({ ...s, stats: parseStats(STATS) }), /too late/);
});
