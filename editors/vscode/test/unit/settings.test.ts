import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { DEFAULTS, languageEnabled, needsRestart, readSettings, serverOptions, Settings } from "../../src/settings";

const read = (values: Record<string, unknown>) => readSettings((key) => values[key]);

test("nothing set gives the defaults and the server's default options", () => {
  const { settings, problems } = read({});
  assert.deepEqual(problems, []);
  assert.deepEqual(settings, DEFAULTS);
  assert.deepEqual(serverOptions(settings), {
    enable: { "*": true }, model: null, device: "cpu", threshold: null, drafts: "seeded",
    maxLines: 8, nextEdit: true, streamPreviews: false, maxTime: 500, exclude: [], excludeSecrets: true,
  });
});

test("settings map to the server's keys", () => {
  const { settings } = read({
    model: "/models/dream", device: "cuda:1", threshold: 0.8, drafts: "only", maxLines: 3,
    languages: { "*": true, markdown: false }, nextEdit: false,
    maxTime: 1500, exclude: ["*.local.py", "private/"], excludeSecrets: false,
  });
  assert.deepEqual(serverOptions(settings), {
    enable: { "*": true, markdown: false }, model: "/models/dream", device: "cuda:1", threshold: 0.8,
    drafts: "only", maxLines: 3, nextEdit: false, streamPreviews: false,
    maxTime: 1500, exclude: ["*.local.py", "private/"], excludeSecrets: false,
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

test("time budget and excluded files: a wrong type or range keeps the default", () => {
  // The server's own range for maxTime is 1..60000 ms; exclude takes non-empty globs only.
  for (const bad of [0, -5, 60001, 250.5, "500", true, null]) {
    const { settings, problems } = read({ maxTime: bad });
    assert.equal(settings.maxTime, 500, `maxTime ${JSON.stringify(bad)}`);
    assert.equal(problems.length, 1);
    assert.match(problems[0], /redraft\.maxTime/);
  }
  assert.equal(read({ maxTime: 1 }).settings.maxTime, 1);
  assert.equal(read({ maxTime: 60000 }).settings.maxTime, 60000);
  for (const bad of ["*.pem", [".env", 3], [" "], { glob: "x" }, null]) {
    const { settings, problems } = read({ exclude: bad });
    assert.deepEqual(settings.exclude, [], `exclude ${JSON.stringify(bad)}`);
    assert.match(problems[0], /redraft\.exclude /);
  }
  for (const bad of ["false", 0, null]) {
    const { settings, problems } = read({ excludeSecrets: bad });
    assert.equal(settings.excludeSecrets, true, `excludeSecrets ${JSON.stringify(bad)}`);
    assert.match(problems[0], /redraft\.excludeSecrets/);
  }
});

test("the named settings win over the same keys in serverSettings", () => {
  const { settings } = read({ serverSettings: { maxTime: 9, exclude: ["a"], excludeSecrets: false }, exclude: ["b"] });
  const options = serverOptions(settings);
  assert.deepEqual(options.exclude, ["b"]);
  assert.equal(options.maxTime, 500);
  assert.equal(options.excludeSecrets, true);
});

test("package.json contributes every setting, with the same default", () => {
  // VS Code's getter returns package.json's default for an unset key, so the two must agree.
  const manifest = JSON.parse(readFileSync(join(__dirname, "../../../package.json"), "utf8"));
  const properties: Record<string, { default: unknown }> = manifest.contributes.configuration.properties;
  const keys = Object.keys(DEFAULTS);
  assert.ok(keys.length > 10);
  assert.deepEqual(Object.keys(properties).sort(), keys.map((k) => `redraft.${k}`).sort());
  for (const key of keys) {
    assert.deepEqual(properties[`redraft.${key}`].default, DEFAULTS[key as keyof Settings], key);
  }
  assert.equal((properties["redraft.maxTime"] as { minimum?: number }).minimum, 1);
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
