/**
 * One line per `redraft/preview` notification ({uri, version, position, step, text, masked}:
 * the engine's whole text after a denoising step) for the "redraft previews" output channel.
 * No VS Code API.
 */

export interface Preview {
  uri: string;
  version: number;
  line: number;
  character: number;
  step: number;
  text: string;
  masked: number;
}

/** A preview notification's fields, or undefined when it is not one. */
export function parsePreview(params: unknown): Preview | undefined {
  const p = params as Record<string, any> | null;
  if (!p || typeof p.uri !== "string" || typeof p.text !== "string") return undefined;
  const pos = p.position ?? {};
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  return { uri: p.uri, version: n(p.version), line: n(pos.line), character: n(pos.character),
    step: n(p.step), text: p.text, masked: n(p.masked) };
}

/** `name:line:col v3 step 2 (masked 4) | text`, 1-based line and column, newlines as ⏎. */
export function formatPreview(p: Preview): string {
  const name = decodeURIComponent(p.uri.replace(/^.*[\\/]/, ""));
  const text = p.text.replace(/\r?\n/g, "⏎");
  return `${name}:${p.line + 1}:${p.character + 1} v${p.version} step ${p.step} (masked ${p.masked}) | ${text}`;
}
