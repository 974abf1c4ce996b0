"""The shipped model's tokenizer: a byte-level BPE trained on its own corpus.

Byte-level, so any text encodes (nothing is ever unknown) and decoding gives the text
back. One special token, ``<|endoftext|>`` (id 0), separates documents and serves as
EOS, BOS and padding. It is wrapped in transformers' ``PreTrainedTokenizerFast``, which
is what :func:`kernels.checkpoint.load_tokenizer` loads back from ``tokenizer.json``.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS = "<|endoftext|>"


def train_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Learn ``vocab_size`` tokens (the 256 bytes, EOS and merges) from ``texts``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=EOS,
        model_max_length=1 << 30,  # documents are encoded whole, then cut into windows
    )
