// End-to-end test of the extension in real VS Code: code-server in headless Chromium, the real
// `redraft serve` (drafts only, so the text is deterministic).
//
//   1. calc.py: type `y = compute(al` under `x = compute(alpha, beta)`; redraft's ghost text
//      (`pha, beta)`) appears; Tab accepts it; the saved file holds `y = compute(alpha, beta)`.
//   2. shapes.py: rename the parameter `radius` of `def volume(height, radius):` to `r` at its
//      definition; the next-edit decoration ("Tab to jump, Tab to accept") appears at a use;
//      Tab, Tab accepts each use in turn; the saved file uses `r` throughout; the status item's
//      tooltip counts the accepts (`redraft/stats`).
//   3. Clicking the status item turns redraft off (no ghost text); its command turns it on again;
//      Ctrl+Right accepts the suggestion's next word, Shift+Tab the rest of the line.
//
// Run by run-e2e.sh (which installs code-server, Node 24 and Chromium, and packages the extension); reads:
//   REDRAFT_E2E_DEPS   folder with node_modules/{code-server,puppeteer-core[,@sparticuz/chromium]}
//   REDRAFT_VSIX        the packaged extension
//   REDRAFT_PYTHON      a Python that imports redraft (the server runs as `python -m redraft.server.cli serve`)
//   REDRAFT_E2E_SCREENSHOT  where the screenshot goes (default /tmp/redraft-e2e/screenshot.png)
//   CHROME              a Chromium/Chrome binary (default: `chromium` on PATH, else @sparticuz/chromium)
//   REDRAFT_E2E_PORT    code-server's port (default: a free one)

import { execFileSync, spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const DEPS = process.env.REDRAFT_E2E_DEPS ?? "/tmp/redraft-e2e/deps";
const VSIX = required("REDRAFT_VSIX");
const PYTHON = process.env.REDRAFT_PYTHON ?? "python3";
const SHOT = process.env.REDRAFT_E2E_SCREENSHOT ?? "/tmp/redraft-e2e/screenshot.png";
const SHAPES = `import math


def volume(height, radius):
    base = math.pi * radius ** 2
    top = radius * 2
    return base * height + top


def describe(shape):
    return f"shape {shape}"
`;

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run test/run-e2e.sh)`);
  return v;
}

const require = createRequire(path.join(DEPS, "package.json"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...a);

/** A fresh workspace, user settings and extensions folder (the VSIX unpacked as publisher.name-version). */
function prepare() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "redraft-e2e-run-"));
  const workspace = path.join(root, "workspace");
  const userData = path.join(root, "user-data");
  const extensions = path.join(root, "extensions");
  fs.mkdirSync(workspace, { recursive: true });
  fs.mkdirSync(path.join(userData, "User"), { recursive: true });
  fs.writeFileSync(path.join(workspace, "calc.py"), "x = compute(alpha, beta)\n");
  fs.writeFileSync(path.join(workspace, "shapes.py"), SHAPES);
  fs.writeFileSync(path.join(userData, "User", "settings.json"), JSON.stringify({
    // the server's stderr goes to a file, printed if the test fails
    "redraft.serverCommand": ["/bin/sh", "-c",
      'echo "start $(date +%T)" >>"$1"; "$0" -m redraft.server.cli serve 2>>"$1"; echo "exit $? $(date +%T)" >>"$1"',
      PYTHON, path.join(root, "server.log")],
    "redraft.drafts": "only",
    // nothing else competes for Tab or the screen
    "editor.quickSuggestions": { other: false, comments: false, strings: false },
    "editor.suggestOnTriggerCharacters": false,
    "editor.wordBasedSuggestions": "off",
    "editor.parameterHints.enabled": false,
    "editor.hover.enabled": false,
    "editor.minimap.enabled": false,
    "workbench.startupEditor": "none",
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.disableAIFeatures": true,
    "workbench.tips.enabled": false,
    "workbench.welcomePage.walkthroughs.openOnInstall": false,
    "extensions.ignoreRecommendations": true,
    "security.workspace.trust.enabled": false,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "files.autoSave": "off",
  }, null, 2));
  const unpacked = path.join(root, "vsix");
  execFileSync(PYTHON, ["-m", "zipfile", "-e", VSIX, unpacked]);
  const manifest = JSON.parse(fs.readFileSync(path.join(unpacked, "extension", "package.json"), "utf8"));
  const target = path.join(extensions, `${manifest.publisher}.${manifest.name}-${manifest.version}`);
  fs.mkdirSync(extensions, { recursive: true });
  fs.renameSync(path.join(unpacked, "extension"), target);
  log("extension unpacked into", target);
  return { root, workspace, userData, extensions };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function startCodeServer(dirs, port) {
  const entry = path.join(path.dirname(require.resolve("code-server/package.json")), "out", "node", "entry.js");
  const args = [entry, "--auth", "none", "--bind-addr", `127.0.0.1:${port}`, "--disable-telemetry",
    "--disable-update-check", "--disable-workspace-trust", "--user-data-dir", dirs.userData,
    "--extensions-dir", dirs.extensions, dirs.workspace];
  const out = fs.openSync(path.join(dirs.root, "code-server.log"), "w");
  const child = spawn(process.execPath, args, {
    detached: true, // its own process group: stopping it stops the extension host and the server too
    stdio: ["ignore", out, out], env: { ...process.env, OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? "1" },
  });
  for (let i = 0; i < 120; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/healthz`);
      if (r.ok) return child;
    } catch { /* not listening yet */ }
    if (child.exitCode !== null) break;
    await sleep(500);
  }
  throw new Error(`code-server did not start; see ${path.join(dirs.root, "code-server.log")}`);
}

async function launchBrowser() {
  const puppeteer = require("puppeteer-core");
  const args = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--no-first-run", "--window-size=1400,900"];
  let executablePath = process.env.CHROME;
  if (!executablePath) {
    try {
      executablePath = execFileSync("sh", ["-c", "command -v chromium || command -v chromium-browser"]).toString().trim();
    } catch { /* none on PATH */ }
  }
  if (!executablePath) {
    const mod = await import(pathToFileURL(require.resolve("@sparticuz/chromium")).href);
    executablePath = await mod.default.executablePath();
  }
  log("browser", executablePath);
  return puppeteer.launch({ executablePath, headless: true, args, defaultViewport: { width: 1400, height: 900 } });
}

/** Wait until `fn` (run in the page) returns something `ok` (truthy by default); returns it. */
async function until(page, what, fn, arg, timeout = 60000, ok = (v) => !!v) {
  const started = Date.now();
  while (Date.now() - started < timeout) {
    const v = await page.evaluate(fn, arg).catch(() => undefined);
    if (ok(v)) return v;
    await sleep(250);
  }
  const last = await page.evaluate(fn, arg).catch(() => undefined);
  throw new Error(`timed out waiting for ${what} (last seen: ${JSON.stringify(last)}; status bar: ${
    JSON.stringify(await page.evaluate(statusBarText).catch(() => ""))})`);
}

const statusBarText = () => [...document.querySelectorAll(".statusbar .statusbar-item")]
  .map((e) => e.textContent.trim()).filter((t) => t).join(" | ");

/** The text of the editor's ghost text, if shown. */
const ghostText = () => [...document.querySelectorAll(".part.editor .ghost-text-decoration, .part.editor .ghost-text")]
  .map((e) => e.textContent).join("").replace(/\u00a0/g, " ");

/** The next-edit hint: a decoration's ::after content in the editor's lines. */
const nextEditHint = () => {
  for (const el of document.querySelectorAll(".part.editor .monaco-editor .view-lines span")) {
    const content = getComputedStyle(el, "::after").content;
    if (content && content.includes("Tab to")) return content;
  }
  return "";
};

async function openFile(page, name) {
  await page.keyboard.down("Control");
  await page.keyboard.press("KeyP");
  await page.keyboard.up("Control");
  await page.waitForSelector(".quick-input-widget input", { visible: true });
  await page.keyboard.type(name, { delay: 20 });
  await until(page, `${name} in quick open`, (n) =>
    [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(n)), name);
  await page.keyboard.press("Enter");
  await until(page, `${name} open`, (n) =>
    document.querySelector(".tabs-container .tab.active")?.textContent.includes(n), name);
  await sleep(300);
  const lines = await page.waitForSelector(".part.editor .monaco-editor .view-lines", { visible: true });
  await lines.click();
  await sleep(300);
}

async function chord(page, mod, key) {
  await page.keyboard.down(mod);
  await page.keyboard.press(key);
  await page.keyboard.up(mod);
}

async function saveAndRead(page, file) {
  await chord(page, "Control", "KeyS");
  const started = Date.now();
  let last = "";
  while (Date.now() - started < 10000) {
    await sleep(300);
    const text = fs.readFileSync(file, "utf8");
    if (text === last) return text;
    last = text;
  }
  return last;
}

async function completes(page, dirs) {
  await openFile(page, "calc.py");
  await chord(page, "Control", "End");
  await page.keyboard.type("y = compute(al", { delay: 60 });
  const ghost = await until(page, "redraft's ghost text", ghostText, undefined, 30000);
  log("ghost text:", JSON.stringify(ghost));
  if (!ghost.includes("pha, beta")) throw new Error(`unexpected ghost text ${JSON.stringify(ghost)}`);
  await page.screenshot({ path: SHOT.replace(/\.png$/, "") + "-ghost-text.png" });
  await page.keyboard.press("Tab");
  await sleep(300);
  const text = await saveAndRead(page, path.join(dirs.workspace, "calc.py"));
  const line = text.split("\n")[1];
  log("calc.py line 2 after Tab:", JSON.stringify(line));
  if (line !== "y = compute(alpha, beta)") throw new Error(`Tab did not accept the suggestion: ${JSON.stringify(text)}`);
}

async function suggestsNextEdits(page, dirs) {
  await openFile(page, "shapes.py");
  const col = SHAPES.split("\n")[3].indexOf("radius") + 1;
  await chord(page, "Control", "KeyG");
  await page.waitForSelector(".quick-input-widget input", { visible: true });
  await page.keyboard.type(`4:${col}`, { delay: 20 });
  await page.keyboard.press("Enter");
  await sleep(300);
  await page.keyboard.down("Control");
  await page.keyboard.down("Shift");
  await page.keyboard.press("ArrowRight"); // selects `radius`
  await page.keyboard.up("Shift");
  await page.keyboard.up("Control");
  await page.keyboard.type("r");
  const hint = await until(page, "the next-edit decoration", nextEditHint, undefined, 30000);
  log("next-edit hint:", hint);
  if (!hint.includes("Tab to jump, Tab to accept")) throw new Error(`unexpected hint ${hint}`);
  await page.screenshot({ path: SHOT });
  log("screenshot:", SHOT);
  // Tab jumps to the use, Tab accepts it; the other use follows.
  for (let i = 0; i < 2; i++) {
    if (await page.evaluate(ghostText)) await page.keyboard.press("Escape"); // a completion would take Tab
    await page.keyboard.press("Tab");
    await until(page, "the cursor on the edit's line", nextEditHint, undefined, 10000,
      (h) => typeof h === "string" && h.includes("Tab to accept") && !h.includes("jump"));
    await page.keyboard.press("Tab");
    await sleep(400);
  }
  const text = await saveAndRead(page, path.join(dirs.workspace, "shapes.py"));
  const body = text.split("\n").slice(3, 6).join("\n");
  log("shapes.py after the next edits:\n" + body);
  if (body.includes("radius") || !body.includes("math.pi * r ** 2") || !body.includes("top = r * 2")) {
    throw new Error("the next edits were not applied");
  }
}

/** Clicking the status item turns redraft off (no ghost text while typing); the command turns it on. */
async function toggles(page) {
  for (const item of await page.$$(".statusbar .statusbar-item")) {
    if ((await item.evaluate((e) => e.textContent)).includes("redraft")) await item.click();
  }
  await until(page, "the status item saying off", statusBarText, undefined, 10000, (t) => /redraft: off/.test(t ?? ""));
  await openFile(page, "calc.py"); // (focus back in the editor)
  await chord(page, "Control", "End");
  await page.keyboard.press("Enter");
  await page.keyboard.type("z = compute(al", { delay: 60 });
  await sleep(1500);
  const ghost = await page.evaluate(ghostText);
  if (ghost) throw new Error(`ghost text while off: ${JSON.stringify(ghost)}`);
  await command(page, "redraft: Turn Completions On/Off");
  await until(page, "the status item back on", statusBarText, undefined, 10000, (t) => /redraft-diffusion/.test(t ?? ""));
  await page.keyboard.press("Backspace");
  await page.keyboard.type("l", { delay: 60 });
  const again = await until(page, "ghost text once on again", ghostText, undefined, 15000);
  log("off: no ghost text; on again:", JSON.stringify(again));
}

/** Ctrl+Right accepts the suggestion's next word, Shift+Tab the rest of its line. */
async function acceptsParts(page, dirs) {
  const file = path.join(dirs.workspace, "calc.py");
  await chord(page, "Control", "ArrowRight");
  await sleep(500);
  const word = (await saveAndRead(page, file)).split("\n")[2];
  log("after Ctrl+Right:", JSON.stringify(word));
  if (!word.startsWith("z = compute(alpha") || word === "z = compute(alpha, beta)") {
    throw new Error(`Ctrl+Right did not accept one word: ${JSON.stringify(word)}`);
  }
  await until(page, "the rest of the suggestion", ghostText, undefined, 10000);
  await chord(page, "Shift", "Tab");
  await sleep(500);
  const line = (await saveAndRead(page, file)).split("\n")[2];
  log("after Shift+Tab:", JSON.stringify(line));
  if (line !== "z = compute(alpha, beta)") throw new Error(`Shift+Tab did not accept the line: ${JSON.stringify(line)}`);
}

async function command(page, title) {
  await page.keyboard.press("F1");
  await page.waitForSelector(".quick-input-widget input", { visible: true });
  await page.keyboard.type(title, { delay: 10 });
  await until(page, `"${title}" in the palette`, (t) =>
    [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(t)), title);
  await page.keyboard.press("Enter");
  await sleep(300);
}

/** The status item's tooltip (hover it): the server's counters from `redraft/stats`. */
async function statusTooltip(page) {
  await page.mouse.move(10, 10);
  await sleep(300);
  const items = await page.$$(".statusbar .statusbar-item");
  for (const item of items) {
    if ((await item.evaluate((e) => e.textContent)).includes("redraft")) {
      await item.hover();
      return until(page, "the status item's tooltip", () =>
        [...document.querySelectorAll(".workbench-hover, .monaco-hover")].map((e) => e.innerText).join("\n"),
      undefined, 10000, (t) => /next edits/.test(t ?? ""));
    }
  }
  throw new Error("no redraft status item");
}

function dumpLogs(dirs) {
  const logs = path.join(dirs.userData, "logs");
  const found = [];
  const walk = (d) => fs.existsSync(d) && fs.readdirSync(d, { withFileTypes: true }).forEach((e) => {
    const p = path.join(d, e.name);
    if (e.isDirectory()) walk(p);
    else if (/redraft|exthost|remoteagent/i.test(e.name)) found.push(p);
  });
  walk(logs);
  for (const f of [path.join(dirs.root, "code-server.log"), path.join(dirs.root, "server.log"), ...found]) {
    if (!fs.existsSync(f)) continue;
    // (code-server here lacks its native logger; leave out that noise)
    const text = fs.readFileSync(f, "utf8").split("\n").filter((l) => !/spdlog|^\s+(at |→|')|^\s*\]|^\s*\}/.test(l)).join("\n");
    console.log(`----- ${f} (last 60 lines)\n${text.split("\n").slice(-60).join("\n")}`);
  }
}

/** Stops code-server with everything it started, and waits until it has gone. */
async function stop(child) {
  if (child.exitCode !== null) return;
  const gone = new Promise((resolve) => child.once("exit", resolve));
  const signal = (sig) => { try { process.kill(-child.pid, sig); } catch { /* already gone */ } };
  signal("SIGTERM");
  const timer = setTimeout(() => signal("SIGKILL"), 5000);
  await gone;
  clearTimeout(timer);
  signal("SIGKILL"); // anything of the group still there
}

async function notifications(page) {
  await page.keyboard.press("Escape");
  await command(page, "Notifications: Show Notifications");
  await sleep(1000);
  return page.evaluate(() => [...document.querySelectorAll(".notifications-center .notification-list-item-message")]
    .map((e) => e.textContent).join("\n"));
}

async function main() {
  fs.mkdirSync(path.dirname(SHOT), { recursive: true });
  const dirs = prepare();
  const port = Number(process.env.REDRAFT_E2E_PORT ?? await freePort());
  const server = await startCodeServer(dirs, port);
  log("code-server on port", port);
  const browser = await launchBrowser();
  let page;
  let failed = false;
  try {
    page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(dirs.workspace)}`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(".monaco-workbench", { timeout: 90000 });
    log("workbench up");
    const status = await until(page, "redraft's status item with the model loaded", statusBarText, undefined,
      180000, (t) => /redraft-diffusion/.test(t ?? ""));
    log("status bar:", status);
    await completes(page, dirs);
    await suggestsNextEdits(page, dirs);
    log("status bar:", await page.evaluate(statusBarText));
    const tooltip = await statusTooltip(page);
    log("status tooltip:\n" + tooltip);
    // the accept commands reached the server: one completion, two next edits
    if (!/1 accepted/.test(tooltip) || !/next edits: \d+ proposed, 2 accepted/.test(tooltip)) {
      throw new Error("the server did not count the accepts");
    }
    await toggles(page);
    await acceptsParts(page, dirs);
    log("PASS");
  } catch (err) {
    failed = true;
    console.error("FAIL:", err.message);
    if (page) {
      await page.screenshot({ path: SHOT }).then(() => log("screenshot:", SHOT)).catch(() => {});
      console.log("notifications:\n" + await notifications(page).catch((e) => `(could not read: ${e.message})`));
    }
    dumpLogs(dirs);
  } finally {
    await browser.close().catch(() => {});
    await stop(server);
    if (!failed && !process.env.REDRAFT_E2E_KEEP) fs.rmSync(dirs.root, { recursive: true, force: true });
    else log("run folder kept:", dirs.root);
  }
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
