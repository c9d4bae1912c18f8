"""Tiny synthetic models for ``conform model --arch``: seeded random weights written to a GGUF with gguf-py.

Two layers (gemma3: six, see ``MIN_LAYERS``), a 128-token vocabulary and no tokenizer
(``tokenizer.ggml.model = no_vocab``: libllama then takes token ids as they are). Matrices are stored in one
type or in a mix as llama-quantize makes it (``weights``: F16, the 32- and 256-element block formats,
``q4_k_m`` ...); norms and the token embedding stay F32. Sizes are multiples of 32 (of 256 where a type has
super-blocks) so every row is whole blocks. Weights are scaled by 1/sqrt(fan-in) so activations stay O(1)
through the layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# one type for every matrix
SINGLE_TYPES = ("f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs",
                "iq3_s", "iq3_xxs", "iq2_s", "iq2_xs", "iq1_s", "iq1_m", "tq1_0", "tq2_0")
# the mixes users download, as llama-quantize's rules give them for a two-layer model (every layer is one
# of the first or last eighth, so attn_v and ffn_down take the larger type throughout): (default type,
# {tensor stem or "output": type}); "mxfp4" is gpt-oss's: experts MXFP4, the rest Q8_0
MIXES: dict[str, tuple[str, dict[str, str]]] = {
    "q4_k_m": ("q4_k", {"attn_v": "q6_k", "ffn_down": "q6_k", "ffn_down_exps": "q6_k", "output": "q6_k"}),
    "q5_k_m": ("q5_k", {"attn_v": "q6_k", "ffn_down": "q6_k", "ffn_down_exps": "q6_k", "output": "q6_k"}),
    "q3_k_m": ("q3_k", {"attn_v": "q5_k", "ffn_down": "q5_k", "ffn_down_exps": "q5_k", "attn_output": "q4_k",
                        "output": "q6_k"}),
    "q2_k": ("q2_k", {"attn_v": "q3_k", "ffn_down": "q3_k", "ffn_down_exps": "q3_k", "output": "q6_k"}),
    "iq2_xxs": ("iq2_xxs", {"attn_v": "q4_k", "ffn_down": "iq3_xxs", "ffn_down_exps": "iq3_xxs", "output": "q5_k"}),
    "mxfp4": ("q8_0", {"ffn_gate_exps": "mxfp4", "ffn_up_exps": "mxfp4", "ffn_down_exps": "mxfp4"}),
}
WEIGHT_TYPES = SINGLE_TYPES + tuple(m for m in MIXES if m not in SINGLE_TYPES)
# where a row is not whole 256-blocks llama-quantize falls back to a 32-block type
_FALLBACK = {"q2_k": "iq4_nl", "q3_k": "iq4_nl", "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0",
             **{t: "iq4_nl" for t in ("iq4_xs", "iq3_s", "iq3_xxs", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_s", "iq1_m")},
             "tq1_0": "q8_0", "tq2_0": "q8_0"}


@dataclass(frozen=True)
class TinyShape:
    n_vocab: int = 128
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_layer: int = 2
    n_ctx_train: int = 256
    n_expert: int = 4
    n_expert_used: int = 2

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


TINY = TinyShape()
TINY_K = TinyShape(n_embd=256, n_ff=256)  # rows of whole 256-element super-blocks for the K and ternary types
# a head of 32 elements: one block of a quantized KV cache's row (llama.cpp needs whole blocks per head)
TINY_KV = TinyShape(n_embd=128, n_ff=128)
# named sizes at published models' dimensions (synthetic weights), for benchmarks at real scale
SIZES = {
    "tiny": TINY,
    "135m": TinyShape(n_vocab=49152, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_layer=30, n_ctx_train=2048),
    "1b": TinyShape(n_vocab=128256, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192, n_layer=16, n_ctx_train=2048),
}


def tensor_type(weights: str, stem: str) -> str:
    """The type a matrix ``stem`` (``attn_v``, ``output``...) is stored in under ``weights``."""
    default, overrides = MIXES.get(weights, (weights, {}))
    return overrides.get(stem, default)


def shape_for(weights: str, cache_types: tuple[str, ...] = ()) -> TinyShape:
    """The tiny shape for ``weights``; a head of whole blocks where a KV cache type is block-quantized."""
    from golden import dtypes

    default, overrides = MIXES.get(weights, (weights, {}))
    types = {default, *overrides.values()} - {"f16"}
    if any(dtypes.block_size(t) == 256 for t in types):
        return TINY_K
    if any(dtypes.is_quantized(t) and TINY.head_dim % dtypes.block_size(t) for t in cache_types):
        return TINY_KV
    return TINY


def _arch_tensors(arch: str, s: TinyShape) -> dict[str, tuple[int, ...]]:
    """The tensors of one layer (``{i}`` is the layer), in numpy order (rows, row length)."""
    hd, kv = s.head_dim, s.head_dim * s.n_head_kv
    attn = {"attn_norm": (s.n_embd,), "attn_q": (s.n_embd, s.n_embd), "attn_k": (kv, s.n_embd),
            "attn_v": (kv, s.n_embd), "attn_output": (s.n_embd, s.n_embd), "ffn_norm": (s.n_embd,)}
    dense_ffn = {"ffn_gate": (s.n_ff, s.n_embd), "ffn_up": (s.n_ff, s.n_embd), "ffn_down": (s.n_embd, s.n_ff)}
    if arch == "llama":
        return {**attn, **dense_ffn}
    if arch == "qwen2":
        return {**attn, "attn_q.bias": (s.n_embd,), "attn_k.bias": (kv,), "attn_v.bias": (kv,), **dense_ffn}
    if arch == "qwen3":
        return {**attn, "attn_q_norm": (hd,), "attn_k_norm": (hd,), **dense_ffn}
    if arch == "qwen3moe":
        return {**attn, "attn_q_norm": (hd,), "attn_k_norm": (hd,), "ffn_gate_inp": (s.n_expert, s.n_embd),
                "ffn_gate_exps": (s.n_expert, s.n_ff, s.n_embd), "ffn_up_exps": (s.n_expert, s.n_ff, s.n_embd),
                "ffn_down_exps": (s.n_expert, s.n_embd, s.n_ff)}
    if arch == "mixtral":  # llama with a routed FFN: llama.cpp loads it as arch llama with experts
        return {**attn, "ffn_gate_inp": (s.n_expert, s.n_embd), "ffn_gate_exps": (s.n_expert, s.n_ff, s.n_embd),
                "ffn_up_exps": (s.n_expert, s.n_ff, s.n_embd), "ffn_down_exps": (s.n_expert, s.n_embd, s.n_ff)}
    if arch == "gemma2":
        return {**attn, "post_attention_norm": (s.n_embd,), "post_ffw_norm": (s.n_embd,), **dense_ffn}
    if arch == "gemma3":  # gemma2's post-norms and qwen3's per-head q/k norms, no soft-capping
        return {**attn, "attn_q_norm": (hd,), "attn_k_norm": (hd,), "post_attention_norm": (s.n_embd,),
                "post_ffw_norm": (s.n_embd,), **dense_ffn}
    raise KeyError(arch)


TIED_OUTPUT = frozenset({"gemma2", "gemma3"})  # the output projection is the token embedding
ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "gemma2", "gemma3")
GGUF_ARCH = {"mixtral": "llama"}  # the architecture name in the file where it is not the --arch name
# the fewest layers an architecture's model has as published: llama.cpp makes every sixth layer of a gemma3
# global and the other five sliding-window (its swa pattern 6); with two layers the global cache of the
# iSWA pair holds no layer, and libllama 0.25.1 aborts at the first context shift (GGML_ASSERT(buffer) in
# llama_kv_cache::set_input_k_shift: the empty cache's shift input is never allocated)
MIN_LAYERS = {"gemma3": 6}


def _metadata(arch: str, s: TinyShape, add: Callable[[str, object], None]) -> None:
    add("context_length", s.n_ctx_train)
    add("embedding_length", s.n_embd)
    add("block_count", s.n_layer)
    add("feed_forward_length", s.n_ff)
    add("attention.head_count", s.n_head)
    add("attention.head_count_kv", s.n_head_kv)
    add("attention.layer_norm_rms_epsilon", 1e-5)
    add("rope.dimension_count", s.head_dim)
    add("rope.freq_base", 10000.0)
    add("vocab_size", s.n_vocab)
    if arch in ("qwen3moe", "mixtral"):
        add("expert_count", s.n_expert)
        add("expert_used_count", s.n_expert_used)
        add("expert_feed_forward_length", s.n_ff)
    if arch in ("gemma2", "gemma3"):
        add("attention.key_length", s.head_dim)
        add("attention.value_length", s.head_dim)
        add("attention.sliding_window", 4096)
    if arch == "gemma2":
        add("attn_logit_softcapping", 50.0)
        add("final_logit_softcapping", 30.0)


def byte_level_vocab() -> tuple[list[str], list[str], list[int], dict[str, int]]:
    """A small real tokenizer for the synthetic models: GPT-2's byte-level BPE over the 256 bytes, a few
    merges of common English pairs, and ChatML's control tokens (a chat template libllama recognises).
    Returns (tokens, merges, token types, special ids)."""
    def byte_char(b: int) -> str:  # GPT-2's printable stand-in for each byte (ggml's byte-level BPE reads it)
        printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        if b in printable:
            return chr(b)
        return chr(256 + sum(1 for x in range(b) if x not in printable))
    tokens = [byte_char(b) for b in range(256)]
    merges = []
    for pair in ("h e", "l l", "l o", "Ġ t", "Ġt he", "he llo", "o r", "Ġ w", "Ġw or", "Ġwor l", "Ġworl d", "i n"):
        left, right = pair.split(" ")
        if left + right not in tokens:
            merges.append(pair)
            tokens.append(left + right)
    specials = {"eos": len(tokens), "im_start": len(tokens) + 1, "im_end": len(tokens) + 2}
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * (len(tokens) - 3) + [3, 3, 3]  # normal, control
    return tokens, merges, types, specials


CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                   "{% endif %}")


def write_tiny_model(path: str | Path, arch: str, weights: str = "q8_0", seed: int = 0,
                     shape: TinyShape | None = None, vocab: bool = False) -> Path:
    """Write a synthetic ``arch`` model to ``path``; returns the path. KeyError for an unknown arch.

    Matrices are quantized by ggml's own reference quantizer (``ggml_quantize_chunk``, the one that
    writes model files) through ctypes: the test data is ggml's, the judgement never uses ggml. That
    runs in a child interpreter: the wheel's ggml loaded here would sit beside the ggml a later
    ``--ggml-lib`` loads in this process, and two ggml registries in one process abort.

    ``vocab``: a real byte-level BPE tokenizer with a ChatML template (:func:`byte_level_vocab`; the
    vocabulary size follows it) in place of ``no_vocab``."""
    if arch not in ARCHITECTURES:
        raise KeyError(f"unknown architecture {arch!r} (synthetic models: {', '.join(ARCHITECTURES)})")
    if weights not in WEIGHT_TYPES:
        raise KeyError(f"unknown weight type {weights!r} (one of {', '.join(WEIGHT_TYPES)})")
    import json
    import os
    import subprocess
    import sys

    shape = shape or shape_for(weights)
    if shape.n_layer < MIN_LAYERS.get(arch, 0):
        import dataclasses

        shape = dataclasses.replace(shape, n_layer=MIN_LAYERS[arch])
    if vocab:
        import dataclasses

        shape = dataclasses.replace(shape, n_vocab=len(byte_level_vocab()[0]))
    request = json.dumps({"path": str(path), "arch": arch, "weights": weights, "seed": seed,
                          "shape": shape.__dict__, "vocab": vocab})
    env = {k: v for k, v in os.environ.items() if k != "GGML_LIB_DIR"}  # the wheel's quantizer: any release's
    proc = subprocess.run([sys.executable, "-m", "conformance.model_synthetic", request], capture_output=True,
                          text=True, env=env, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"writing the synthetic {arch} {weights} model failed: {tail}")
    return Path(path)


def _write_tiny_model(path: str | Path, arch: str, weights: str, seed: int, shape: TinyShape,
                      vocab: bool = False) -> Path:
    import gguf

    from device.ggml.quant import ggml_quantize
    from golden import dtypes
    rng = np.random.default_rng(seed)
    path = Path(path)
    file_arch = GGUF_ARCH.get(arch, arch)
    writer = gguf.GGUFWriter(str(path), file_arch)
    writer.add_name(f"conform tiny {arch} {weights} seed {seed}")

    def add(key: str, value: object) -> None:
        full = f"{file_arch}.{key}"
        if isinstance(value, float):
            writer.add_float32(full, value)
        else:
            writer.add_uint32(full, int(value))  # type: ignore[call-overload]

    _metadata(arch, shape, add)
    if vocab:
        tokens, merges, types, specials = byte_level_vocab()
        if len(tokens) != shape.n_vocab:
            raise ValueError(f"the vocabulary has {len(tokens)} tokens, the shape {shape.n_vocab}")
        writer.add_string("tokenizer.ggml.model", "gpt2")
        writer.add_string("tokenizer.ggml.pre", "default")
        writer.add_token_list(tokens)
        writer.add_token_merges(merges)
        writer.add_token_types(types)
        writer.add_bos_token_id(specials["eos"])
        writer.add_eos_token_id(specials["im_end"])
        writer.add_add_bos_token(True)
        writer.add_chat_template(CHATML_TEMPLATE)
    else:
        writer.add_string("tokenizer.ggml.model", "no_vocab")

    def tensor(name: str, np_shape: tuple[int, ...]) -> None:
        if len(np_shape) == 1:  # norms near 1, biases near 0
            base = 0.0 if name.endswith(".bias") else 1.0
            writer.add_tensor(name, (base + 0.1 * rng.standard_normal(np_shape)).astype(np.float32))
            return
        data = (rng.standard_normal(np_shape) / np.sqrt(np_shape[-1])).astype(np.float32)
        stem = name.removesuffix(".weight").split(".")[-1]
        qtype = tensor_type(weights, stem)
        if qtype != "f16" and np_shape[-1] % dtypes.block_size(qtype):
            qtype = _FALLBACK[qtype]
        if name == "token_embd.weight" or name.endswith("ffn_gate_inp.weight"):
            writer.add_tensor(name, data)  # F32: looked up by rows / the router stays exact
        elif qtype == "f16":
            writer.add_tensor(name, data.astype(np.float16))
        else:
            row_bytes = dtypes.row_size(qtype, np_shape[-1])
            raw = ggml_quantize(data.reshape(-1, np_shape[-1]), qtype).reshape(*np_shape[:-1], row_bytes)
            writer.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType(dtypes.GGML_TYPE_ID[qtype]))

    tensor("token_embd.weight", (shape.n_vocab, shape.n_embd))
    for layer in range(shape.n_layer):
        for stem, np_shape in _arch_tensors(arch, shape).items():
            name = f"blk.{layer}.{stem}" + ("" if stem.endswith(".bias") else ".weight")
            tensor(name, np_shape)
    tensor("output_norm.weight", (shape.n_embd,))
    if arch not in TIED_OUTPUT:
        tensor("output.weight", (shape.n_vocab, shape.n_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":  # the child write_tiny_model runs: one JSON request on the command line
    import json
    import sys

    _request = json.loads(sys.argv[1])
    _write_tiny_model(_request["path"], _request["arch"], _request["weights"], _request["seed"],
                      TinyShape(**_request["shape"]), _request.get("vocab", False))
