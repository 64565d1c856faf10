/**
 * Next-edit suggestions in the editor: asks the server (`textDocument/copilotInlineEdit`)
 * once edits settle, draws the nearest proposal as a decoration at its target line, and
 * while one is pending sets the context key `redraft.nextEditPending`, which binds Tab
 * (jump there, then accept) and Escape (dismiss) in package.json.
 *
 * An edit is applied only while the document still has the version it was computed on;
 * the edits left after one is accepted are moved (nextEdits.rebase) and shown in turn.
 * Any other change to the document drops them and asks again.
 */

import * as vscode from "vscode";
import { afterAccept, hint, isCurrent, jumpTarget, NextEdit, parseEdits, rebase } from "./nextEdits";

export const CONTEXT_KEY = "redraft.nextEditPending";
const SETTLE_MS = 350; // the server computes ahead after a 300 ms pause; ask just after

export interface NextEditServer {
  request(uri: string, version: number, position: vscode.Position, token: vscode.CancellationToken): Promise<unknown>;
  didShow(edit: NextEdit): void;
  accepted(edit: NextEdit): void;
  wanted(document: vscode.TextDocument): boolean;
  log(message: string): void;
}

const toPos = (p: { line: number; character: number }) => new vscode.Position(p.line, p.character);
const toRange = (e: NextEdit) => new vscode.Range(toPos(e.range.start), toPos(e.range.end));

export class NextEditView implements vscode.Disposable {
  private pending: NextEdit[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private cancel: vscode.CancellationTokenSource | undefined;
  private applying = false;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly target = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    border: "1px solid",
    borderColor: new vscode.ThemeColor("editorInfo.foreground"),
  });
  private readonly label = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorInfo.foreground"), fontStyle: "italic", margin: "0 0 0 2em" },
  });

  constructor(private readonly server: NextEditServer) {
    this.disposables.push(
      vscode.workspace.onDidChangeTextDocument((e) => this.changed(e)),
      vscode.window.onDidChangeActiveTextEditor(() => this.clear()),
      vscode.window.onDidChangeTextEditorSelection((e) => {
        if (this.pending.length && e.textEditor.document.uri.toString() === this.pending[0].uri) this.draw();
      }),
    );
  }

  /** The edit on screen, if any (for tests and the status item). */
  get current(): NextEdit | undefined {
    return this.pending[0];
  }

  private changed(e: vscode.TextDocumentChangeEvent): void {
    if (this.applying || e.contentChanges.length === 0) return;
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document !== e.document) return;
    this.clear();
    if (this.server.wanted(e.document)) this.schedule(e.document);
  }

  /** Ask for next edits once the document has stayed at this version for a moment. */
  schedule(document: vscode.TextDocument, delay = SETTLE_MS): void {
    if (this.timer) clearTimeout(this.timer);
    this.cancel?.cancel();
    const version = document.version;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (document.version === version && !document.isClosed) void this.ask(document, version);
    }, delay);
  }

  private async ask(document: vscode.TextDocument, version: number): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document !== document) return;
    const source = (this.cancel = new vscode.CancellationTokenSource());
    let result: unknown;
    try {
      result = await this.server.request(document.uri.toString(), version, editor.selection.active, source.token);
    } catch (err) {
      if (!source.token.isCancellationRequested) this.server.log(`next edit: ${err}`);
      return;
    }
    if (source.token.isCancellationRequested || document.version !== version) return;
    const uri = document.uri.toString();
    const edits = parseEdits(result).filter((e) => isCurrent(e, uri, version, document.lineCount));
    if (edits.length) this.show(edits);
  }

  private show(edits: NextEdit[]): void {
    this.pending = edits;
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, true);
    this.draw();
    this.server.didShow(edits[0]);
  }

  private editorFor(edit: NextEdit): vscode.TextEditor | undefined {
    const editor = vscode.window.activeTextEditor;
    return editor && editor.document.uri.toString() === edit.uri ? editor : undefined;
  }

  private draw(): void {
    const edit = this.pending[0];
    const editor = edit && this.editorFor(edit);
    if (!edit || !editor) return this.clear();
    const end = editor.document.lineAt(edit.range.start.line).range.end;
    editor.setDecorations(this.target, [toRange(edit)]);
    const text = hint(edit, editor.selection.active.line, this.pending.length - 1);
    editor.setDecorations(this.label, [{
      range: new vscode.Range(end, end),
      renderOptions: { after: { contentText: text } },
    }]);
  }

  /** Tab: jump to the edit when the cursor is elsewhere, accept it when already there. */
  async jumpOrAccept(): Promise<void> {
    const edit = this.pending[0];
    const editor = edit && this.editorFor(edit);
    if (!edit || !editor) return this.clear();
    if (editor.selection.active.line !== edit.range.start.line) {
      const at = toPos(jumpTarget(edit));
      editor.selection = new vscode.Selection(at, at);
      editor.revealRange(toRange(edit), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      return this.draw();
    }
    await this.accept(editor, edit);
  }

  private async accept(editor: vscode.TextEditor, edit: NextEdit): Promise<void> {
    const document = editor.document;
    if (!isCurrent(edit, document.uri.toString(), document.version, document.lineCount)) {
      this.server.log(`next edit for version ${edit.version} dropped: the document is at ${document.version}`);
      return this.clear();
    }
    const change = new vscode.WorkspaceEdit();
    change.replace(document.uri, toRange(edit), edit.text);
    this.applying = true;
    let ok = false;
    try {
      ok = await vscode.workspace.applyEdit(change);
    } finally {
      this.applying = false;
    }
    if (!ok || document.version !== edit.version + 1) {
      this.clear();
      if (ok && this.server.wanted(document)) this.schedule(document);
      return;
    }
    const at = toPos(afterAccept(edit));
    editor.selection = new vscode.Selection(at, at);
    if (edit.command) {
      try {
        await vscode.commands.executeCommand(edit.command.command, ...(edit.command.arguments ?? []));
      } catch (err) {
        this.server.log(`next edit command ${edit.command.command}: ${err}`);
      }
    }
    this.server.accepted(edit);
    const rest = rebase(this.pending.slice(1), edit, document.version);
    if (rest.length) this.show(rest);
    else {
      this.clear();
      if (this.server.wanted(document)) this.schedule(document); // what the accepted edit implies
    }
  }

  /** Escape, a change of editor, or a change of the document: nothing pending. */
  clear(): void {
    const had = this.pending.length > 0;
    this.pending = [];
    for (const editor of vscode.window.visibleTextEditors) {
      editor.setDecorations(this.target, []);
      editor.setDecorations(this.label, []);
    }
    if (had) void vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.cancel?.cancel();
    this.clear();
    this.target.dispose();
    this.label.dispose();
    for (const d of this.disposables) d.dispose();
  }
}
