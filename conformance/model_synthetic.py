"""Tiny synthetic models for ``conform model --arch``: seeded random weights written to a GGUF with gguf-py.

Two layers, a 128-token vocabulary and no tokenizer (``tokenizer.ggml.model = no_vocab``: libllama then
takes token ids as they are). Matrices are stored as F16, Q4_0, Q4_1 or Q8_0 (``weights``); norms and the
token embedding stay F32. Sizes are multiples of 32 so every matrix row is whole Q4_0/Q8_0 blocks.
Weights are scaled by 1/sqrt(fan-in) so activations stay O(1) through both layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WEIGHT_TYPES = ("f16", "q4_0", "q4_1", "q8_0")  # q4_1: a type the model tier's golden does not read yet


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


def write_tiny_model(path: str | Path, arch: str, weights: str = "q8_0", seed: int = 0,
                     shape: TinyShape = TINY) -> Path:
    """Write a synthetic ``arch`` model to ``path``; returns the path. KeyError for an unknown arch."""
    import gguf

    if arch not in ARCHITECTURES:
        raise KeyError(f"unknown architecture {arch!r} (synthetic models: {', '.join(ARCHITECTURES)})")
    if weights not in WEIGHT_TYPES:
        raise KeyError(f"unknown weight type {weights!r} (one of {', '.join(WEIGHT_TYPES)})")
    qtype = {"f16": gguf.GGMLQuantizationType.F16, "q4_0": gguf.GGMLQuantizationType.Q4_0,
             "q4_1": gguf.GGMLQuantizationType.Q4_1, "q8_0": gguf.GGMLQuantizationType.Q8_0}[weights]
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
    writer.add_string("tokenizer.ggml.model", "no_vocab")

    def tensor(name: str, np_shape: tuple[int, ...]) -> None:
        if len(np_shape) == 1:  # norms near 1, biases near 0
            base = 0.0 if name.endswith(".bias") else 1.0
            writer.add_tensor(name, (base + 0.1 * rng.standard_normal(np_shape)).astype(np.float32))
            return
        data = (rng.standard_normal(np_shape) / np.sqrt(np_shape[-1])).astype(np.float32)
        if name == "token_embd.weight" or name.endswith("ffn_gate_inp.weight"):
            writer.add_tensor(name, data)  # F32: looked up by rows / the router stays exact
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, data.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

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
