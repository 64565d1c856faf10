/**
 * One line per `redraft/draft` notification ({uri, version, position, step, text, masked}:
 * the engine's whole draft after a denoising step) for the "redraft drafts" output channel.
 * No VS Code API.
 */

export interface Draft {
  uri: string;
  version: number;
  line: number;
  character: number;
  step: number;
  text: string;
  masked: number;
}

/** A draft notification's fields, or undefined when it is not one. */
export function parseDraft(params: unknown): Draft | undefined {
  const p = params as Record<string, any> | null;
  if (!p || typeof p.uri !== "string" || typeof p.text !== "string") return undefined;
  const pos = p.position ?? {};
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  return { uri: p.uri, version: n(p.version), line: n(pos.line), character: n(pos.character),
    step: n(p.step), text: p.text, masked: n(p.masked) };
}

/** `name:line:col v3 step 2 (masked 4) | text`, 1-based line and column, newlines as ⏎. */
export function formatDraft(d: Draft): string {
  const name = decodeURIComponent(d.uri.replace(/^.*[\\/]/, ""));
  const text = d.text.replace(/\r?\n/g, "⏎");
  return `${name}:${d.line + 1}:${d.character + 1} v${d.version} step ${d.step} (masked ${d.masked}) | ${text}`;
}
