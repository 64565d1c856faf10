/**
 * redraft for VS Code: starts `redraft serve` (the `redraft.serverCommand` setting) with
 * vscode-languageclient, which registers the LSP inline completion provider itself; adds
 * next-edit suggestions (nextEditView), accept next word / line, a status bar item, the
 * settings as `initializationOptions` (re-sent on change) and an optional live view of the
 * text after each denoising step (previews). All prediction logic lives in the server.
 */

import * as fs from "node:fs";
import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { findProgram, notFoundMessage, startFailureMessage } from "./launch";
import { NextEdit } from "./nextEdits";
import { NextEditView } from "./nextEditView";
import { formatPreview, parsePreview } from "./previews";
import {
  ignoredMessage, Inspected, languageEnabled, needsRestart, readSettings, serverCommandLine, serverOptions, Settings,
  userLevel,
} from "./settings";
import { parseStats, statusText, statusTooltip, StatusState } from "./status";

const SELECTOR = [{ scheme: "file" }, { scheme: "untitled" }];
const INLINE_EDIT = "textDocument/copilotInlineEdit";
const DID_SHOW_EDIT = "textDocument/didShowInlineEdit";
const DID_SHOW = "textDocument/didShowCompletion";
const DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion";

/**
 * A LanguageClient that stays quiet while it starts: a failed start is told by the extension
 * in one message, not by the client's own notifications on top of it (it still logs them).
 */
class Client extends LanguageClient {
  quiet = false;

  override error(message: string, data?: unknown, showNotification: boolean | "force" = true): void {
    super.error(message, data, this.quiet ? false : showNotification);
  }
}

/** Whether `file` is a file this user may run. */
function runnable(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) return false;
    if (process.platform !== "win32") fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

class Extension implements vscode.Disposable {
  private settings: Settings;
  private client: Client | undefined;
  private readonly log = vscode.window.createOutputChannel("redraft", { log: true });
  private previewsChannel: vscode.OutputChannel | undefined;
  private readonly item = vscode.window.createStatusBarItem("redraft.status", vscode.StatusBarAlignment.Right, 100);
  private readonly state: StatusState = { enabled: true, server: "starting" };
  private readonly nextEdits: NextEditView;
  private statsTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly told = new Set<string>(); // messages about ignored workspace settings, each shown once

  constructor() {
    this.settings = this.read();
    this.item.name = "redraft";
    this.item.command = "redraft.toggle";
    this.nextEdits = new NextEditView({
      request: (uri, version, position, token) => this.running()
        ? this.running()!.sendRequest(INLINE_EDIT, {
          textDocument: { uri, version },
          position: { line: position.line, character: position.character },
          context: { triggerKind: 2 },
        }, token).then((r) => {
          this.refreshStats(300); // a judging that came too late shows in the status bar
          return r;
        })
        : Promise.resolve({ edits: [] }),
      didShow: (edit: NextEdit) => void this.running()?.sendNotification(DID_SHOW_EDIT, { item: edit }),
      accepted: () => this.refreshStats(300),
      wanted: (document) => this.settings.nextEdit && this.running() !== undefined
        && SELECTOR.some((s) => s.scheme === document.uri.scheme) && languageEnabled(this.settings, document.languageId),
      log: (message) => this.log.info(message),
    });
    const command = (name: string, run: (...args: any[]) => unknown) =>
      this.disposables.push(vscode.commands.registerCommand(name, run));
    command("redraft.toggle", () => this.toggle());
    command("redraft.restart", () => this.restart());
    command("redraft.showStats", () => this.showStats());
    command("redraft.acceptNextWord", () => this.acceptPart("word"));
    command("redraft.acceptNextLine", () => this.acceptPart("line"));
    command("redraft.jumpOrAcceptEdit", () => this.nextEdits.jumpOrAccept());
    command("redraft.dismissEdit", () => this.nextEdits.clear());
    command("redraft.suggestEdit", () => {
      const editor = vscode.window.activeTextEditor;
      if (editor && this.nextEdits) this.nextEdits.schedule(editor.document, 0);
    });
    this.disposables.push(this.nextEdits, this.item, this.log,
      vscode.workspace.onDidChangeConfiguration((e) => e.affectsConfiguration("redraft") && this.reconfigure()));
    this.render();
    this.item.show();
  }

  private read(): Settings {
    // Where code goes and what is read come from the user's own settings only (settings.ts).
    const config = vscode.workspace.getConfiguration("redraft");
    const { get, ignored } = userLevel((key) => config.inspect(key) as Inspected | undefined);
    const { settings, problems } = readSettings(get);
    if (problems.length) {
      for (const p of problems) this.log?.warn(p);
      void vscode.window.showWarningMessage(`redraft: ${problems.join("; ")}`);
    }
    const message = ignored.length ? ignoredMessage(ignored) : undefined;
    if (message && !this.told.has(message)) { // once per session, however often settings change
      this.told.add(message);
      this.log?.warn(message);
      void vscode.window.showWarningMessage(message);
    }
    return settings;
  }

  private running(): LanguageClient | undefined {
    return this.client?.state === State.Running ? this.client : undefined;
  }

  async start(): Promise<void> {
    const commandLine = serverCommandLine(this.settings);
    const [command, ...args] = commandLine;
    // The server starts in the first workspace folder, as the language client spawns it.
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? process.cwd();
    if (!findProgram(command, { env: process.env, platform: process.platform, cwd, runnable })) {
      return this.failed(commandLine, notFoundMessage(command), "not found");
    }
    const server: ServerOptions = { command, args, transport: TransportKind.stdio };
    const options: LanguageClientOptions = {
      documentSelector: SELECTOR,
      outputChannel: this.log,
      initializationFailedHandler: () => false, // no retry, and no message of its own: see failed()
      initializationOptions: () => serverOptions(this.settings),
      middleware: {
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          if (!languageEnabled(this.settings, document.languageId)) return null;
          const started = Date.now();
          const result = await next(document, position, context, token);
          const items = Array.isArray(result) ? result : result?.items;
          if (items?.length) {
            this.state.lastMs = Date.now() - started;
            // VS Code has no stable "shown" event: an item handed over for a request still
            // current is what the editor shows (the server's `shown` counter).
            if (!token.isCancellationRequested) void this.running()?.sendNotification(DID_SHOW, { item: {} });
            this.refreshStats(300);
          }
          return result;
        },
      },
    };
    const client = (this.client = new Client("redraft", "redraft", server, options));
    client.onDidChangeState((e) => {
      if (client !== this.client || (this.state.server === "failed" && e.newState === State.Stopped)) return;
      this.state.server = e.newState === State.Running ? "running" : e.newState === State.Starting ? "starting" : "stopped";
      this.render();
      if (e.newState === State.Running) this.refreshStats(500); // (also after a restart)
    });
    client.onNotification("redraft/preview", (params: unknown) => {
      const preview = parsePreview(params);
      if (preview && this.settings.showPreviews) this.previews().appendLine(formatPreview(preview));
    });
    this.state.server = "starting";
    this.state.stats = undefined;
    this.render();
    client.quiet = true;
    try {
      await client.start();
    } catch (err) {
      if (client === this.client) await this.failed(commandLine, startFailureMessage(commandLine, err), err);
    } finally {
      client.quiet = false;
    }
  }

  /** The server did not start: the status bar says so, and the user gets one message. */
  private async failed(commandLine: string[], message: string, cause: unknown): Promise<void> {
    this.state.server = "failed";
    this.render();
    this.log.error(`could not start ${JSON.stringify(commandLine)}: ${cause}`);
    const choice = await vscode.window.showErrorMessage(message, "Open settings", "Show output");
    if (choice === "Open settings") {
      void vscode.commands.executeCommand("workbench.action.openSettings", "redraft.serverCommand");
    } else if (choice === "Show output") {
      this.log.show(true);
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.nextEdits.clear();
    if (client?.isRunning()) await client.stop().catch((err) => this.log.warn(`stop: ${err}`));
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  private async reconfigure(): Promise<void> {
    const old = this.settings;
    this.settings = this.read();
    this.state.enabled = this.settings.enabled;
    if (!this.settings.enabled || !this.settings.nextEdit) this.nextEdits.clear();
    if (this.settings.showPreviews && !old.showPreviews) this.previews().show(true);
    this.render();
    if (needsRestart(old, this.settings)) return this.restart();
    await this.running()?.sendNotification(DidChangeConfigurationNotification.type,
      { settings: { redraft: serverOptions(this.settings) } });
    this.refreshStats(1000); // a new model shows once loaded
  }

  private async toggle(): Promise<void> {
    await vscode.workspace.getConfiguration("redraft").update("enabled", !this.settings.enabled,
      vscode.ConfigurationTarget.Global);
  }

  private async acceptPart(kind: "word" | "line"): Promise<void> {
    await vscode.commands.executeCommand(kind === "word"
      ? "editor.action.inlineSuggest.acceptNextWord" : "editor.action.inlineSuggest.acceptNextLine");
    void this.running()?.sendNotification(DID_PARTIALLY_ACCEPT, { kind });
  }

  private previews(): vscode.OutputChannel {
    return (this.previewsChannel ??= vscode.window.createOutputChannel("redraft previews"));
  }

  /** Ask `redraft/stats` after `delay` ms; again every 2 s until the model has loaded. */
  private refreshStats(delay: number): void {
    if (this.statsTimer) clearTimeout(this.statsTimer);
    this.statsTimer = setTimeout(async () => {
      this.statsTimer = undefined;
      const client = this.running();
      if (!client) return;
      try {
        const before = this.state.stats;
        this.state.stats = parseStats(await client.sendRequest("redraft/stats", {}));
        const now = this.state.stats;
        this.state.lateEdits = before !== undefined && now !== undefined && now.editsLate > before.editsLate;
      } catch (err) {
        this.log.warn(`redraft/stats: ${err}`);
      }
      this.render();
      if (!this.state.stats?.model && !this.state.stats?.modelError) this.refreshStats(2000);
    }, delay);
  }

  private async showStats(): Promise<void> {
    const client = this.running();
    if (!client) return void vscode.window.showWarningMessage("redraft: the server is not running");
    const stats = await client.sendRequest("redraft/stats", {});
    this.log.info(`redraft/stats ${JSON.stringify(stats, null, 2)}`);
    this.log.show(true);
  }

  private render(): void {
    this.state.enabled = this.settings.enabled;
    this.item.text = statusText(this.state);
    this.item.tooltip = statusTooltip(this.state);
  }

  dispose(): void {
    if (this.statsTimer) clearTimeout(this.statsTimer);
    this.previewsChannel?.dispose();
    for (const d of this.disposables) d.dispose();
  }
}

let extension: Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  extension = new Extension();
  context.subscriptions.push(extension);
  void extension.start(); // the server starts in the background; activation does not wait for it
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
