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
 *
 * A repository's `.vscode/settings.json` is not the user's choice: `userLevel(inspect)` takes
 * the settings that decide where code goes or what is read only from the user's own level
 * (VS Code's `inspect().globalValue`): `model`, `excludeSecrets` (a workspace may turn it on,
 * never off), `exclude` (a workspace's globs add to the user's, never replace them), and in
 * `serverSettings` the keys `engineUrl`, `model`, `modelsDirs`, `excludeSecrets`, `exclude`
 * (and a nested `redraft` object). The server refuses unsafe values of these too.
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

/**
 * The server's program and arguments: `serverCommand`, and a model folder from the user's
 * settings as `--model PATH`, the command line being where the server trusts a folder (from
 * the editor's settings it takes only names and folders under its models folders).
 */
export function serverCommandLine(s: Settings): string[] {
  return isModelFolder(s.model) ? [...s.serverCommand, "--model", s.model as string] : [...s.serverCommand];
}

/** A path rather than a shipped name ("redraft-ar") or a pulled Hugging Face id ("org/name"). */
function isModelFolder(model: string | null): boolean {
  return model !== null && !/^[\w.-]+(\/[\w.-]+)?$/.test(model);
}

/** Whether a change from `a` to `b` needs a new server process (not just new options). */
export function needsRestart(a: Settings, b: Settings): boolean {
  return JSON.stringify(serverCommandLine(a)) !== JSON.stringify(serverCommandLine(b));
}

/** Whether completions and next edits are wanted for a language id. */
export function languageEnabled(s: Settings, languageId: string): boolean {
  if (!s.enabled) return false;
  return s.languages[languageId] ?? s.languages["*"] ?? true;
}

/** What VS Code's `inspect()` says of one setting (the levels this module reads). */
export interface Inspected {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

// Server settings a workspace may not give, in the server's snake_case (it takes either case).
const USER_ONLY_SERVER_KEYS = new Set(["engine_url", "model", "models_dirs", "exclude_secrets", "exclude", "redraft"]);
const snake = (key: string) => key.replace(/(?<!^)(?=[A-Z])/g, "_").toLowerCase();

/**
 * The value each setting gets when the workspace's own levels may not decide the sensitive
 * ones (see the top of this file), and one line per workspace value left out. `undefined`
 * means "not set" (readSettings then keeps the default).
 */
export function userLevel(inspect: (key: keyof Settings) => Inspected | undefined):
  { get: (key: keyof Settings) => unknown; ignored: string[] } {
  const ignored: string[] = [];
  const levels = (key: keyof Settings) => {
    const i = inspect(key) ?? {};
    return { user: i.globalValue, workspace: [i.workspaceValue, i.workspaceFolderValue].filter((v) => v !== undefined) };
  };
  const get = (key: keyof Settings): unknown => {
    const { user, workspace } = levels(key);
    const merged = workspace.length ? workspace[workspace.length - 1] : user;
    switch (key) {
      case "model":
        if (workspace.some((v) => JSON.stringify(v) !== JSON.stringify(user))) {
          ignored.push("redraft.model");
        }
        return user;
      case "excludeSecrets":
        if (workspace.includes(false) && user !== false) ignored.push("redraft.excludeSecrets");
        return workspace.includes(true) ? true : user;
      case "exclude": {
        const globs = [user, ...workspace].filter(Array.isArray).flat();
        return [user, ...workspace].some((v) => v !== undefined) ? [...new Set(globs)] : undefined;
      }
      case "serverSettings": {
        if (!workspace.length) return user;
        const out: Record<string, unknown> = isObject(user) ? { ...user } : {};
        for (const level of workspace) {
          if (!isObject(level)) return merged; // a wrong type: readSettings reports it
          for (const [k, v] of Object.entries(level)) {
            if (USER_ONLY_SERVER_KEYS.has(snake(k))) {
              if (JSON.stringify(v) !== JSON.stringify(isObject(user) ? user[k] : undefined)) {
                ignored.push(`redraft.serverSettings.${k}`);
              }
              continue;
            }
            out[k] = v;
          }
        }
        return out;
      }
      default:
        return merged;
    }
  };
  return { get, ignored };
}

/** The message for settings a workspace gave and the user level alone may give. */
export function ignoredMessage(ignored: string[]): string {
  return `redraft: ${[...new Set(ignored)].join(", ")} from this workspace's settings ignored: where code goes ` +
    "and what is read are set in your user settings only";
}
