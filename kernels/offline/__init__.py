"""Offline tooling: corpora and task generators, tokenizer training, objectives, train,
evaluate, frontier, model cards, bench. The worker never imports this subpackage."""
