import { test } from "node:test";
import assert from "node:assert/strict";
import { findProgram, Lookup, notFoundMessage, startFailureMessage } from "../../src/launch";

const posix = (files: string[], PATH = "/usr/bin:/venv/bin"): Lookup =>
  ({ env: { PATH }, platform: "linux", cwd: "/work", runnable: (f) => files.includes(f) });

test("a bare name is found on PATH, first folder first", () => {
  assert.equal(findProgram("redraft", posix(["/venv/bin/redraft"])), "/venv/bin/redraft");
  assert.equal(findProgram("redraft", posix(["/usr/bin/redraft", "/venv/bin/redraft"])), "/usr/bin/redraft");
  assert.equal(findProgram("redraft", posix(["/venv/bin/redraft"], "")), undefined);
  assert.equal(findProgram("redraft", posix([])), undefined);
  assert.equal(findProgram("redraft", posix(["/work/redraft"], "::/venv/bin")), undefined); // empty PATH entries
});

test("a name with a folder is taken as a path, relative to where the server starts", () => {
  assert.equal(findProgram("/venv/bin/redraft", posix(["/venv/bin/redraft"], "")), "/venv/bin/redraft");
  assert.equal(findProgram("./bin/redraft", posix(["/work/bin/redraft"])), "/work/bin/redraft");
  assert.equal(findProgram("/no/venv/bin/redraft", posix(["/venv/bin/redraft"])), undefined);
});

test("Windows: Path, ';' and the .exe a spawn adds", () => {
  const lookup: Lookup = {
    env: { Path: "C:\\Python\\Scripts;C:\\venv\\Scripts" }, platform: "win32", cwd: "C:\\work",
    runnable: (f) => f === "C:\\venv\\Scripts\\redraft.exe",
  };
  assert.equal(findProgram("redraft", lookup), "C:\\venv\\Scripts\\redraft.exe");
  assert.equal(findProgram("C:\\venv\\Scripts\\redraft", lookup), "C:\\venv\\Scripts\\redraft.exe");
});

test("a missing program gets one plain message, never the raw spawn error", () => {
  const message = notFoundMessage("redraft");
  assert.match(message, /'redraft' was not found/);
  assert.match(message, /pip install/);
  assert.match(message, /redraft\.serverCommand/);
  // what vscode-languageclient rejects with when the spawn fails
  const rejected = "Launching server using command redraft failed. Error: spawn redraft ENOENT";
  assert.equal(startFailureMessage(["redraft", "serve"], rejected), message);
  const err = Object.assign(new Error("spawn redraft ENOENT"), { code: "ENOENT" });
  assert.equal(startFailureMessage(["redraft", "serve"], err), message);
  assert.doesNotMatch(message, /ENOENT|spawn/);
});

test("other start failures say what happened and where the output is", () => {
  assert.match(startFailureMessage(["/x/redraft", "serve"], "Launching server using command /x/redraft failed. Error: spawn /x/redraft EACCES"),
    /'\/x\/redraft' is not executable/);
  const exited = new Error("Server process exited before the connection could be established (code: 2, signal: null).");
  const message = startFailureMessage(["redraft", "serve", "--bogus"], exited);
  assert.match(message, /^redraft: the server \(redraft serve --bogus\) did not start: Server process exited/);
  assert.match(message, /Output panel/);
});
