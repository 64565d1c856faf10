/**
 * The status bar item's text and tooltip, from the toggle, the server's state and
 * `redraft/stats` (counters, `latency_ms` {p50, p95}, `model`, `model_error`).
 *
 * "Last" latency is the round trip of the newest inline completion that showed something,
 * as this extension measured it; p50/p95 are the server's own. No VS Code API.
 */

export type ServerState = "starting" | "running" | "stopped" | "failed";

export interface Stats {
  model: string | null;
  modelError: string | null;
  p50: number | null;
  p95: number | null;
  requests: number;
  answered: number;
  accepted: number;
  editsProposed: number;
  editsAccepted: number;
  editsLate: number; // judgings whose own budget (nextEditTime) ran out: a busy machine
}

export interface StatusState {
  enabled: boolean;
  server: ServerState;
  stats?: Stats;
  lastMs?: number | null;
  lateEdits?: boolean; // `editsLate` grew since the stats before: next edits came too late
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const str = (v: unknown): string | null => (typeof v === "string" && v.length > 0 ? v : null);

/** The fields the status item shows, from a `redraft/stats` answer (anything else: undefined). */
export function parseStats(result: unknown): Stats | undefined {
  if (typeof result !== "object" || result === null) return undefined;
  const r = result as Record<string, unknown>;
  const latency = (r.latency_ms ?? {}) as Record<string, unknown>;
  return {
    model: str(r.model),
    modelError: str(r.model_error),
    p50: num(latency.p50),
    p95: num(latency.p95),
    requests: num(r.requests) ?? 0,
    answered: num(r.answered) ?? 0,
    accepted: num(r.accepted) ?? 0,
    editsProposed: num(r.edits_proposed) ?? 0,
    editsAccepted: num(r.edits_accepted) ?? 0,
    editsLate: num(r.edits_late) ?? 0,
  };
}

/** A model path shows as its last part. */
export function modelName(model: string): string {
  const parts = model.split(/[\\/]+/).filter((p) => p.length > 0);
  return parts.length ? parts[parts.length - 1] : model;
}

export function formatMs(ms: number): string {
  return ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}

/** The status bar text (with a codicon). */
export function statusText(s: StatusState): string {
  if (!s.enabled) return "$(circle-slash) redraft: off";
  if (s.server === "failed") return "$(error) redraft";
  if (s.server === "stopped") return "$(debug-stop) redraft";
  if (s.server === "starting" || !s.stats) return "$(loading~spin) redraft";
  if (s.stats.modelError) return "$(warning) redraft";
  if (!s.stats.model) return "$(loading~spin) redraft: loading model, drafts meanwhile";
  const ms = s.lastMs ?? (s.stats.requests > 0 ? s.stats.p50 : null);
  const latency = ms === null ? "" : ` ${formatMs(ms)}`;
  const late = s.lateEdits ? " $(watch)" : "";
  return `$(sparkle) ${modelName(s.stats.model)}${latency}${late}`;
}

/** The tooltip: what the text abbreviates, and what a click does. */
export function statusTooltip(s: StatusState): string {
  const lines: string[] = [];
  if (!s.enabled) lines.push("redraft is off.");
  else if (s.server === "failed") lines.push("redraft: the server did not start (see the redraft output).");
  else if (s.server === "stopped") lines.push("redraft: the server stopped.");
  else if (s.stats?.modelError) lines.push(`redraft: the model did not load: ${s.stats.modelError}`);
  else if (s.stats?.model) lines.push(`redraft: ${s.stats.model}`);
  else if (s.stats) lines.push("redraft: the model is loading; completions come from drafts (copies from your code) meanwhile.");
  else lines.push("redraft: starting");
  const st = s.stats;
  if (st && s.enabled) {
    if (s.lastMs != null) lines.push(`last completion: ${formatMs(s.lastMs)}`);
    if (st.p50 !== null && st.p95 !== null && st.requests > 0) {
      lines.push(`server latency: p50 ${formatMs(st.p50)}, p95 ${formatMs(st.p95)}`);
    }
    lines.push(`completions: ${st.answered} of ${st.requests} requests answered, ${st.accepted} accepted`);
    const late = st.editsLate > 0 ? `, ${st.editsLate} judged too late (a busy machine: raise redraft.serverSettings nextEditTime)` : "";
    lines.push(`next edits: ${st.editsProposed} proposed, ${st.editsAccepted} accepted${late}`);
  }
  lines.push(s.enabled ? "Click to turn redraft off." : "Click to turn redraft on.");
  return lines.join("\n");
}
