/**
 * The extension's settings (`redraft.*` in VS Code) and what the server gets from them.
 *
 * `readSettings(get)` reads every key through a getter (VS Code's configuration, or a plain
 * object in tests) and keeps the default for a value of the wrong type, with one line per
 * problem. `serverOptions(settings)` is the object sent as `initializationOptions` and,
 * after a change, as `workspace/didChangeConfiguration` `{settings: {redraft: ...}}`: every
 * key is sent every time, so a setting the user removes returns to the server's default.
 *
 * The server validates values itself (an invalid one keeps its default with one message);
 * this module only checks types and knows no VS Code API.
 */

export type Drafts = "seeded" | "only" | "off";

export interface Settings {
  enabled: boolean; // the on/off toggle: off sends `enable: false` and asks nothing
  serverCommand: string[]; // program and arguments, e.g. ["redraft", "serve"]
  model: string | null; // checkpoint folder or name; null = the shipped default
  device: string;
  threshold: number | null; // unmasking confidence threshold; null = the model's default
  languages: Record<string, boolean>; // language id -> enabled; "*" = every other language
  drafts: Drafts;
  maxLines: number;
  nextEdit: boolean; // next-edit suggestions (computed ahead by the server, shown here)
  streamPreviews: boolean; // ask the server for `redraft/preview` notifications
  showPreviews: boolean; // show those previews in the "redraft previews" output channel
  maxTime: number; // a request's time budget in ms, waiting included (server: 1..60000)
  exclude: string[]; // globs of files never read, on top of the secret-file defaults
  excludeSecrets: boolean; // also never read the usual secret files (.env, keys, credentials)
  serverSettings: Record<string, unknown>; // any other server setting, passed as is
}

export const DEFAULTS: Readonly<Settings> = Object.freeze({
  enabled: true,
  serverCommand: ["redraft", "serve"],
  model: null,
  device: "cpu",
  threshold: null,
  languages: { "*": true },
  drafts: "seeded",
  maxLines: 8,
  nextEdit: true,
  streamPreviews: false,
  showPreviews: false,
  maxTime: 500,
  exclude: [],
  excludeSecrets: true,
  serverSettings: {},
});

type Check = (value: unknown) => boolean;

const isString: Check = (v) => typeof v === "string";
const isBool: Check = (v) => typeof v === "boolean";
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

const CHECKS: { [K in keyof Settings]: Check } = {
  enabled: isBool,
  serverCommand: (v) => Array.isArray(v) && v.length > 0 && v.every((s) => typeof s === "string" && s.length > 0),
  model: (v) => v === null || (isString(v) && (v as string).trim().length > 0),
  device: (v) => isString(v) && (v as string).length > 0,
  threshold: (v) => v === null || (typeof v === "number" && v >= 0 && v <= 1),
  languages: (v) => isObject(v) && Object.values(v).every(isBool),
  drafts: (v) => v === "seeded" || v === "only" || v === "off",
  maxLines: (v) => typeof v === "number" && Number.isInteger(v) && v >= 1,
  nextEdit: isBool,
  streamPreviews: isBool,
  showPreviews: isBool,
  maxTime: (v) => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 60000,
  exclude: (v) => Array.isArray(v) && v.every((g) => typeof g === "string" && g.trim().length > 0),
  excludeSecrets: isBool,
  serverSettings: isObject,
};

/** Settings from a getter (undefined = not set), and one line per value that was ignored. */
export function readSettings(get: (key: keyof Settings) => unknown): { settings: Settings; problems: string[] } {
  const settings = { ...DEFAULTS } as Settings;
  const problems: string[] = [];
  for (const key of Object.keys(CHECKS) as (keyof Settings)[]) {
    let value = get(key);
    if (value === undefined) continue;
    if (key === "model" && value === "") value = null; // an emptied text box means "the default"
    if (CHECKS[key](value)) {
      (settings as unknown as Record<string, unknown>)[key] = value;
    } else {
      problems.push(`redraft.${key} = ${JSON.stringify(value)} is not valid; using ${JSON.stringify(DEFAULTS[key])}`);
    }
  }
  return { settings, problems };
}

/** The server's options (its own key names) for these settings. */
export function serverOptions(s: Settings): Record<string, unknown> {
  return {
    ...s.serverSettings,
    enable: s.enabled ? { ...s.languages } : false,
    model: s.model,
    device: s.device,
    threshold: s.threshold,
    drafts: s.drafts,
    maxLines: s.maxLines,
    nextEdit: s.nextEdit,
    streamPreviews: s.streamPreviews || s.showPreviews,
    maxTime: s.maxTime,
    exclude: [...s.exclude],
    excludeSecrets: s.excludeSecrets,
  };
}

/** Whether a change from `a` to `b` needs a new server process (not just new options). */
export function needsRestart(a: Settings, b: Settings): boolean {
  return JSON.stringify(a.serverCommand) !== JSON.stringify(b.serverCommand);
}

/** Whether completions and next edits are wanted for a language id. */
export function languageEnabled(s: Settings, languageId: string): boolean {
  if (!s.enabled) return false;
  return s.languages[languageId] ?? s.languages["*"] ?? true;
}
