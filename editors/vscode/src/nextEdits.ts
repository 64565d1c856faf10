/**
 * Next-edit suggestions as the server sends them (`textDocument/copilotInlineEdit`):
 * `{edits: [{text, range, textDocument: {uri, version}, command}]}`, nearest first.
 *
 * Here: reading that answer defensively, the version check before applying, moving the
 * edits that remain after one is applied (so a rename's other uses can be accepted one
 * Tab after another), and the hint shown at the target line. No VS Code API.
 */

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface Command {
  title: string;
  command: string;
  arguments?: unknown[];
}

export interface NextEdit {
  text: string;
  range: Range;
  uri: string;
  version: number;
  command?: Command;
}

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0;

function asPosition(v: unknown): Position | undefined {
  const p = v as Position | undefined;
  return p && isInt(p.line) && isInt(p.character) ? { line: p.line, character: p.character } : undefined;
}

function asRange(v: unknown): Range | undefined {
  const r = v as { start?: unknown; end?: unknown } | undefined;
  const start = asPosition(r?.start);
  const end = asPosition(r?.end);
  if (!start || !end || compare(start, end) > 0) return undefined;
  return { start, end };
}

function asCommand(v: unknown): Command | undefined {
  const c = v as Command | undefined;
  if (!c || typeof c.command !== "string") return undefined;
  return { title: typeof c.title === "string" ? c.title : "", command: c.command,
    arguments: Array.isArray(c.arguments) ? c.arguments : undefined };
}

/** The well-formed edits of a `copilotInlineEdit` answer, in the server's order. */
export function parseEdits(result: unknown): NextEdit[] {
  const edits = (result as { edits?: unknown })?.edits;
  if (!Array.isArray(edits)) return [];
  const out: NextEdit[] = [];
  for (const e of edits) {
    const range = asRange(e?.range);
    const doc = e?.textDocument;
    if (!range || typeof e?.text !== "string" || typeof doc?.uri !== "string" || !isInt(doc?.version)) continue;
    out.push({ text: e.text, range, uri: doc.uri, version: doc.version, command: asCommand(e.command) });
  }
  return out;
}

export function compare(a: Position, b: Position): number {
  return a.line !== b.line ? a.line - b.line : a.character - b.character;
}

/** An edit may be applied only to the document and version it was computed on. */
export function isCurrent(edit: NextEdit, uri: string, version: number, lineCount?: number): boolean {
  if (edit.uri !== uri || edit.version !== version) return false;
  return lineCount === undefined || edit.range.end.line < lineCount;
}

/**
 * The edits left after `applied` was made (the document now at `version`), moved to
 * where their text now is. Edits on other lines stay; edits after it on its line shift by
 * the change in length; edits overlapping it are dropped. An applied edit that adds or
 * removes lines drops the rest (they will be asked for again).
 */
export function rebase(rest: NextEdit[], applied: NextEdit, version: number): NextEdit[] {
  const { start, end } = applied.range;
  if (start.line !== end.line || applied.text.includes("\n")) return [];
  const delta = applied.text.length - (end.character - start.character);
  const out: NextEdit[] = [];
  for (const e of rest) {
    if (e === applied) continue;
    const before = compare(e.range.end, start) <= 0;
    const after = compare(e.range.start, end) >= 0;
    if (!before && !after) continue; // overlaps the applied edit
    let range = e.range;
    if (after && e.range.start.line === end.line) {
      const shift = (p: Position): Position =>
        p.line === end.line ? { line: p.line, character: p.character + delta } : p;
      range = { start: shift(e.range.start), end: shift(e.range.end) };
    }
    out.push({ ...e, range, version });
  }
  return out;
}

/** Where the cursor goes when jumping to an edit, and after accepting it. */
export function jumpTarget(edit: NextEdit): Position {
  return edit.range.start;
}

export function afterAccept(edit: NextEdit): Position {
  const lines = edit.text.split("\n");
  const last = lines[lines.length - 1];
  const { start } = edit.range;
  return lines.length === 1
    ? { line: start.line, character: start.character + last.length }
    : { line: start.line + lines.length - 1, character: last.length };
}

/** The hint drawn after the target line: first Tab jumps there, the next one accepts. */
export function hint(edit: NextEdit, cursorLine: number, more: number): string {
  const shown = edit.text.length > 40 ? edit.text.slice(0, 39) + "…" : edit.text;
  const what = edit.text === "" ? "delete" : `→ ${shown.replace(/\n/g, "⏎")}`;
  const keys = cursorLine === edit.range.start.line ? "Tab to accept" : "Tab to jump, Tab to accept";
  const rest = more > 0 ? ` · ${more} more` : "";
  return `${what} · ${keys} · Escape dismisses${rest}`;
}
