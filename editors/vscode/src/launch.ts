/**
 * The server's program before and after a start: where `redraft.serverCommand`'s program is
 * (the PATH lookup the process spawn would do), and the one message a user gets when the
 * server cannot start. Knows nothing of VS Code; the file system comes in as a function.
 */

import * as path from "node:path";

/** How a program is looked up: the environment, the platform, the folder the server starts in. */
export interface Lookup {
  env: NodeJS.ProcessEnv;
  platform: NodeJS.Platform;
  cwd: string;
  /** Whether `file` is a file this user may run. */
  runnable: (file: string) => boolean;
}

// What a spawn without a shell tries on Windows after the name itself.
const WINDOWS_EXTENSIONS = [".com", ".exe"];

/**
 * The file `program` runs, or undefined when there is none: a name with a folder in it
 * (relative to `cwd`), or else the first match on PATH, as a spawn without a shell finds it.
 */
export function findProgram(program: string, lookup: Lookup): string | undefined {
  const p = lookup.platform === "win32" ? path.win32 : path.posix;
  const candidates = (file: string) => lookup.platform === "win32"
    ? [file, ...WINDOWS_EXTENSIONS.map((ext) => file + ext)] : [file];
  const hasFolder = program.includes("/") || (lookup.platform === "win32" && program.includes("\\"));
  if (hasFolder) {
    return candidates(p.resolve(lookup.cwd, program)).find(lookup.runnable);
  }
  const pathVar = lookup.env.PATH ?? lookup.env.Path ?? "";
  for (const dir of pathVar.split(p.delimiter)) {
    if (!dir) continue;
    const found = candidates(p.join(dir, program)).find(lookup.runnable);
    if (found) return found;
  }
  return undefined;
}

/** What the user reads when `program` is not there to run. */
export function notFoundMessage(program: string): string {
  return `redraft: the server command '${program}' was not found. Install redraft into a Python ` +
    "environment (pip install -e . in the redraft repository) or set redraft.serverCommand to its full " +
    "path, e.g. [\"/path/to/venv/bin/redraft\", \"serve\"].";
}

/**
 * What the user reads when the server did not start: a missing or non-executable program
 * said plainly, anything else with the error and where the server's output is.
 */
export function startFailureMessage(commandLine: string[], err: unknown): string {
  const program = commandLine[0] ?? "";
  const text = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  if (code === "ENOENT" || /\bENOENT\b/.test(text)) return notFoundMessage(program);
  if (code === "EACCES" || /\bEACCES\b/.test(text)) {
    return `redraft: the server command '${program}' is not executable; check redraft.serverCommand.`;
  }
  const detail = text.replace(/^Launching server using command \S+ failed\.\s*/, "").trim();
  return `redraft: the server (${commandLine.join(" ")}) did not start` + (detail ? `: ${detail}` : "") +
    ". See the Output panel (\"redraft\").";
}
