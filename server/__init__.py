"""redraft.server: the editor-facing side of redraft, over the engine.

    core/   what every front end shares: documents and their tree-sitter trees, edit
            history, the context builder, drafts (copy candidates from the code), extra
            context, post-processing, next-edit candidates, settings, and the inference
            executor with the one completion pipeline (`core.inference.answer`)
    lsp/    the language server (`redraft serve`): protocol, handlers, session, scheduler
    http/   the HTTP API for Zed / OpenAI / Ollama / Inception clients (`redraft serve --http`)
    eval/   offline evaluation on real code (`redraft eval infill`, `redraft eval next-edit`)
    cli.py  the command line, on top of them all

The core never imports a front end and the fronts never import each other
(tests/test_layers.py), so a figure the evaluation measures is what the server does. The
engine must import without anything this package needs.
"""
