import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  DEFAULTS, ignoredMessage, Inspected, languageEnabled, needsRestart, readSettings, serverCommandLine, serverOptions,
  Settings, userLevel,
} from "../../src/settings";

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

// -- a repository's settings ------------------------------------------------------------------

/** readSettings over VS Code's inspect() levels: user (global), workspace, workspace folder. */
const levels = (user: Record<string, unknown>, workspace: Record<string, unknown> = {},
  folder: Record<string, unknown> = {}) => {
  const { get, ignored } = userLevel((key) => {
    const i: Inspected = {};
    if (key in user) i.globalValue = user[key];
    if (key in workspace) i.workspaceValue = workspace[key];
    if (key in folder) i.workspaceFolderValue = folder[key];
    return i;
  });
  const { settings, problems } = readSettings(get);
  return { settings, problems, ignored, options: serverOptions(settings) };
};

test("a workspace cannot choose the model, the engine or turn the secret files on", () => {
  const hostile = {
    model: "./ckpt", excludeSecrets: false, exclude: [],
    serverSettings: { engineUrl: "https://collect.example", engine_url: "http://x", modelsDirs: ["."],
      redraft: { engineUrl: "https://collect.example" }, contextTokens: 512 },
  };
  const { options, ignored, problems } = levels({ model: "/home/me/models/mine", exclude: ["*.local.py"] }, hostile);
  assert.deepEqual(problems, []);
  assert.equal(options.model, "/home/me/models/mine");
  assert.equal(options.excludeSecrets, true);
  assert.deepEqual(options.exclude, ["*.local.py"]);
  assert.equal(options.contextTokens, 512); // other server settings pass
  for (const key of ["engineUrl", "engine_url", "modelsDirs", "redraft"]) assert.equal(key in options, false, key);
  assert.deepEqual([...ignored].sort(), ["redraft.excludeSecrets", "redraft.model", "redraft.serverSettings.engineUrl",
    "redraft.serverSettings.engine_url", "redraft.serverSettings.modelsDirs", "redraft.serverSettings.redraft"]);
  assert.match(ignoredMessage(ignored), /^redraft: redraft\.model, .* ignored: .*user settings only$/);
});

test("a workspace folder is a workspace level too", () => {
  const { options, ignored } = levels({}, {}, { model: "/repo/ckpt", serverSettings: { engineUrl: "http://evil" } });
  assert.equal(options.model, null);
  assert.equal("engineUrl" in options, false);
  assert.deepEqual(ignored, ["redraft.model", "redraft.serverSettings.engineUrl"]);
});

test("a workspace may add excluded files and turn the secret files on, never the reverse", () => {
  const { options, ignored } = levels({ exclude: ["private/"], excludeSecrets: false },
    { exclude: ["*.gen.py"], excludeSecrets: true }, { exclude: ["private/", "build/"] });
  assert.deepEqual(options.exclude, ["private/", "*.gen.py", "build/"]);
  assert.equal(options.excludeSecrets, true);
  assert.deepEqual(ignored, []);
  assert.equal(levels({ excludeSecrets: false }).options.excludeSecrets, false); // the user's own choice
});

test("the user's own sensitive settings pass, and a workspace repeating them is not reported", () => {
  const user = { model: "redraft-ar", serverSettings: { engineUrl: "http://127.0.0.1:8080", maxTime: 900 } };
  const { options, ignored } = levels(user, { model: "redraft-ar", serverSettings: { engineUrl: "http://127.0.0.1:8080" } });
  assert.equal(options.model, "redraft-ar");
  assert.equal(options.engineUrl, "http://127.0.0.1:8080");
  assert.equal(options.maxTime, 500); // the named setting wins over serverSettings, as before
  assert.deepEqual(ignored, []);
  const plain = levels({}, { drafts: "only", maxTime: 900 }).options; // the rest: workspace over user, as VS Code
  assert.equal(plain.drafts, "only");
  assert.equal(plain.maxTime, 900);
});

test("a model folder from the user's settings goes on the server's command line", () => {
  assert.deepEqual(serverCommandLine(read({ model: "/home/me/models/mine" }).settings),
    ["redraft", "serve", "--model", "/home/me/models/mine"]);
  for (const name of ["redraft-ar", "Qwen/Qwen2.5-Coder-0.5B", null]) {
    assert.deepEqual(serverCommandLine(read({ model: name }).settings), ["redraft", "serve"], String(name));
  }
  assert.equal(needsRestart(read({ model: "/a" }).settings, read({ model: "/b" }).settings), true);
  assert.equal(needsRestart(read({ model: "redraft-ar" }).settings, read({}).settings), false);
});

test("package.json restricts the sensitive settings in untrusted workspaces", () => {
  const manifest = JSON.parse(readFileSync(join(__dirname, "../../../package.json"), "utf8"));
  const untrusted = manifest.capabilities.untrustedWorkspaces;
  assert.equal(untrusted.supported, "limited");
  assert.deepEqual([...untrusted.restrictedConfigurations].sort(), ["redraft.exclude", "redraft.excludeSecrets",
    "redraft.model", "redraft.serverCommand", "redraft.serverSettings"]);
});
