"""The model's own tokenizer, through libllama: a prompt's text becomes the ids the model's users get.

:func:`read_vocabulary` loads only the GGUF's vocabulary (``vocab_only``: no weights, no device) and
answers its size, whether it has a tokenizer (``no_vocab`` models have none), and the prompt's ids:
``llama_tokenize`` of the text (the BOS the model asks for added), or with ``chat`` the text as the
user's message laid out by the model's chat template (``llama_chat_apply_template``) and tokenized with
its control tokens read as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from device.llama import lib as llama_lib


@dataclass
class Vocabulary:
    n_vocab: int
    has_tokenizer: bool
    chat_template: str | None = None
    prompt_ids: list[int] = field(default_factory=list)  # the prompt's ids (empty where no text was given)
    prompt_text: str = ""  # the text tokenized (the chat template's layout with --chat)
    detokenized: bytes = b""  # the prompt's ids back to bytes (token_to_piece): the text, where it round-trips


class TokenizerError(llama_lib.LlamaLibraryError):
    """The prompt cannot be tokenized as asked (one line)."""


def read_vocabulary(lib_dir: str | None, model_path: str | Path, text: str | None = None,
                    chat: bool = False) -> Vocabulary:
    lib = llama_lib.load(lib_dir)
    lib.log_tail = []
    model = lib.call("model_load", str(model_path).encode(), lib.vocab_only_params())
    if not model:
        raise llama_lib.LlamaLibraryError(f"{model_path}: libllama {lib.version} cannot read its vocabulary: "
                                          f"{lib.last_error() or 'no reason given'}")
    try:
        vocab = Vocabulary(lib.n_vocab(model), lib.has_tokenizer(model), lib.chat_template(model))
        if text is None:
            return vocab
        if not vocab.has_tokenizer:
            raise TokenizerError(f"{model_path} has no tokenizer (tokenizer.ggml.model no_vocab): give token ids "
                                 "with --tokens")
        if chat:
            if not vocab.chat_template:
                raise TokenizerError(f"{model_path} has no chat template (tokenizer.chat_template): --chat needs one")
            laid_out = lib.apply_chat_template(vocab.chat_template, [("user", text)])
            if laid_out is None:
                raise TokenizerError(f"{model_path}: libllama {lib.version} does not recognise the model's chat "
                                     "template (llama_chat_apply_template returned -1)")
            vocab.prompt_text = laid_out
            vocab.prompt_ids = lib.tokenize(model, laid_out, add_special=True, parse_special=True)
        else:
            vocab.prompt_text = text
            vocab.prompt_ids = lib.tokenize(model, text, add_special=True, parse_special=False)
        vocab.detokenized = b"".join(lib.piece(model, t) for t in vocab.prompt_ids)
        return vocab
    finally:
        lib.call("model_free", model)
