import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULTS, languageEnabled, needsRestart, readSettings, serverOptions, Settings } from "../../src/settings";

const read = (values: Record<string, unknown>) => readSettings((key) => values[key]);

test("nothing set gives the defaults and the server's default options", () => {
  const { settings, problems } = read({});
  assert.deepEqual(problems, []);
  assert.deepEqual(settings, DEFAULTS);
  assert.deepEqual(serverOptions(settings), {
    enable: { "*": true }, model: null, device: "cpu", threshold: null, drafts: "seeded",
    maxLines: 8, nextEdit: true, streamPreviews: false,
  });
});

test("settings map to the server's keys", () => {
  const { settings } = read({
    model: "/models/dream", device: "cuda:1", threshold: 0.8, drafts: "only", maxLines: 3,
    languages: { "*": true, markdown: false }, nextEdit: false,
  });
  assert.deepEqual(serverOptions(settings), {
    enable: { "*": true, markdown: false }, model: "/models/dream", device: "cuda:1", threshold: 0.8,
    drafts: "only", maxLines: 3, nextEdit: false, streamPreviews: false,
  });
});

test("off sends enable: false whatever the languages say", () => {
  const { settings } = read({ enabled: false, languages: { python: true } });
  assert.equal(serverOptions(settings).enable, false);
  assert.equal(languageEnabled(settings, "python"), false);
});

test("showing previews asks the server to stream them", () => {
  assert.equal(serverOptions(read({ showPreviews: true }).settings).streamPreviews, true);
  assert.equal(serverOptions(read({ streamPreviews: true }).settings).streamPreviews, true);
});

test("other server settings pass through, but the named settings win", () => {
  const { settings } = read({ serverSettings: { contextTokens: 2048, drafts: "off" }, drafts: "only" });
  const options = serverOptions(settings);
  assert.equal(options.contextTokens, 2048);
  assert.equal(options.drafts, "only");
});

test("a value of the wrong type keeps its default, with one problem each", () => {
  const { settings, problems } = read({ serverCommand: [], threshold: 3, drafts: "sometimes", maxLines: 2.5, model: "" });
  assert.deepEqual(settings.serverCommand, ["redraft", "serve"]);
  assert.equal(settings.threshold, null);
  assert.equal(settings.drafts, "seeded");
  assert.equal(settings.maxLines, 8);
  assert.equal(settings.model, null); // an empty box means the default, not a problem
  assert.equal(problems.length, 4);
  assert.match(problems[0], /redraft\.serverCommand/);
});

test("languages: an entry wins over '*', which wins over the default", () => {
  const s: Settings = { ...DEFAULTS, languages: { "*": false, python: true } };
  assert.equal(languageEnabled(s, "python"), true);
  assert.equal(languageEnabled(s, "go"), false);
  assert.equal(languageEnabled({ ...DEFAULTS, languages: {} }, "go"), true);
});

test("only a new server command needs a restart", () => {
  const a = read({}).settings;
  assert.equal(needsRestart(a, read({ model: "x", drafts: "off" }).settings), false);
  assert.equal(needsRestart(a, read({ serverCommand: ["python", "-m", "redraft.server.cli", "serve"] }).settings), true);
});
