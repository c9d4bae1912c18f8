"""Run a GGUF model through libllama on one ggml device and capture what the device computed.

:func:`run_model` loads the model with every layer on the chosen device, decodes a prefill of several
token ids and then single-token decode steps that read the KV cache, and returns the logits of every
step. With ``capture=True`` the scheduler's eval callback observes every node llama.cpp computes: for
each node the op, its op_params, and every source's and the output's type, shape, strides and bytes as
they sit on the device (:class:`CapturedNode`). The callback splits the graph at every node it
observes (so no fusion happens): the end-to-end logits come from a second run without it.

``tamper`` (tests and demonstrations only) is called with each captured node before the graph goes on
and may overwrite the node's output on the device: the nodes after it then consume the changed values,
as they would consume a wrong kernel's output.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from device.base import DeviceError
from device.ggml import lib as ggml_lib
from device.llama import lib as llama_lib
from golden import dtypes

# ggml type ids of the types the golden reads (stable across releases), from the one dtype table
GGML_TYPES = {d.ggml_type: name for name, d in dtypes.DTYPES.items()}
NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "i8": np.int8,
                "i16": np.int16}
# elements and bytes per block of each block format
BLOCK = {name: (d.block_size, d.type_size) for name, d in dtypes.DTYPES.items() if d.kind == "quant"}
READABLE = frozenset(GGML_TYPES.values())


def type_name(ggml: ggml_lib.GgmlLib, type_id: int) -> str:
    """ggml's own name of a type id (``q4_1``), so a type the golden does not read is named as ggml names it."""
    known = GGML_TYPES.get(type_id)
    if known is not None:
        return known
    name = ggml.base.ggml_type_name(type_id) if 0 <= type_id < 1024 else None
    return name.decode(errors="replace") if name else f"type{type_id}"


class ModelLoadError(DeviceError):
    """The model cannot be loaded or decoded on this device (the message says why, in one line)."""


@dataclass
class CapturedTensor:
    name: str
    dtype: str  # ggml's name of the type (ggml_type_name): a GGML_TYPES name where the golden reads it
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    raw: np.ndarray  # uint8: the bytes from the tensor's first to its last element
    address: int  # the device address of the first element
    buffer: int  # the backend buffer: (buffer, address) identifies memory (Vulkan's addresses restart per buffer)
    op: str  # the op that produced it (NONE for weights and inputs)

    @property
    def readable(self) -> bool:
        """Whether the golden reads this type (else only its raw bytes are known)."""
        return self.dtype in READABLE

    def values(self) -> np.ndarray:
        """The logical values in numpy order (ne3, ne2, ne1, ne0); quantized types stay raw blocks, packed row
        after row (a view into a quantized KV cache, a head of each cell, is gathered so), and a type the
        golden does not read stays raw bytes."""
        if self.dtype in BLOCK:
            return self.packed_blocks()
        if not self.readable:
            return self.raw
        dtype = np.dtype(np.uint16 if self.dtype == "bf16" else NUMPY_DTYPES.get(self.dtype, np.float32))
        if not self.raw.size:
            return np.zeros(tuple(reversed(self.ne)), dtype)
        out = np.lib.stride_tricks.as_strided(self.raw.view(np.uint8)[: self.raw.size - self.raw.size % dtype.itemsize]
                                              .view(dtype), shape=tuple(reversed(self.ne)),
                                              strides=tuple(reversed(self.nb)), writeable=False).copy()
        if self.dtype == "bf16":
            return (out.astype(np.uint32) << 16).view(np.float32)
        return out


    def row_bytes(self) -> int:
        block_elems, block_bytes = BLOCK[self.dtype]
        return self.ne[0] // block_elems * block_bytes

    def rows_view(self, raw: np.ndarray) -> np.ndarray:
        """``raw`` (this tensor's bytes) as (ne3, ne2, ne1, row bytes): each row's blocks where the strides put
        them (a row's blocks are contiguous: nb0 is the block size)."""
        row = self.row_bytes()
        return np.lib.stride_tricks.as_strided(raw, shape=(*reversed(self.ne[1:]), row),
                                               strides=(*reversed(self.nb[1:]), 1))

    def packed_blocks(self) -> np.ndarray:
        row = self.row_bytes()
        if self.nb[1] == row and self.nb[2] == row * self.ne[1] and self.nb[3] == self.nb[2] * self.ne[2]:
            return self.raw
        if not self.raw.size:
            return self.raw
        return np.ascontiguousarray(self.rows_view(self.raw)).reshape(-1)


@dataclass
class CapturedNode:
    index: int  # order of computation within the run
    step: int  # 0 = prefill, 1.. = decode steps
    name: str
    op: str  # ggml_op_desc: the unary or GLU op for UNARY/GLU nodes
    op_params: bytes
    srcs: list[CapturedTensor | None]
    out: CapturedTensor
    backend: str = ""  # the buffer the output lives in (Vulkan0, CPU...): where the scheduler ran the node
    host: bool = False  # that buffer is host memory: the CPU backend computed the node


@dataclass
class ModelRun:
    device: str
    logits: list[np.ndarray]  # per step: (n_tokens of the step, n_vocab) float32
    nodes: list[CapturedNode] = field(default_factory=list)  # empty where the run was given ``on_node``
    description: str = ""
    n_vocab: int = 0
    steps: list[list[int]] = field(default_factory=list)  # the ids fed, step by step (greedy ones included)
    plan: list[Step] = field(default_factory=list)  # every batch as decoded: what a later run replays exactly
    n_ctx: int = 0  # the context size asked of libllama (a replay asks the same)
    n_nodes: int = 0  # the nodes captured (kept in ``nodes`` or handed to ``on_node``)


# chooses the token a greedy step feeds from the run so far: the argmax of logits row ``row`` of the last
# step (its logits, and the nodes of a capture run)
NextToken = Callable[[ModelRun, int], int]

MemoryOp = tuple[str, int, int, int, int]  # ("rm", seq, p0, p1, 0) or ("add", seq, p0, p1, delta)


@dataclass
class Step:
    """One llama_decode call: a batch of tokens, each with its position and sequence, and the KV-cache edits
    made before it (a context shift's seq_rm + seq_add, a sequence removed). ``from_rows[i]``: the row of the
    step before whose greedy choice token ``i`` is (None: a given token)."""

    tokens: list[int]
    pos: list[int]
    seqs: list[int]
    before: list[MemoryOp] = field(default_factory=list)
    from_rows: list[int | None] = field(default_factory=list)


@dataclass(frozen=True)
class KvOptions:
    """The KV cache as a run uses it: its types, its size, and how many sequences share it.

    ``n_ctx``: the context (0: room for the whole run). Where a sequence's next token would not fit in its
    share (``n_ctx // parallel`` cells) the run shifts it as llama.cpp's examples do: the first ``n_keep``
    tokens stay, half of the rest is removed (``seq_rm``) and the remainder moved back (``seq_add``), which
    makes the next decode rope the K cache in place. ``parallel``: sequences decoded in one batch, of
    different prompt lengths; midway through the greedy steps the last one is removed and a new one, of
    another length, takes its cells."""

    type_k: str = "f16"
    type_v: str = "f16"
    n_ctx: int = 0
    parallel: int = 1
    n_keep: int = 1

    @property
    def default(self) -> bool:
        return self == KvOptions()


class Planner:
    """The steps of a run: the given ones (a prefill, then single tokens) for each sequence, then ``greedy``
    steps of one token per live sequence, with the context shifts and the midway sequence swap."""

    def __init__(self, steps: list[list[int]], greedy: int, kv: KvOptions) -> None:
        self.given, self.greedy, self.kv = steps, greedy, kv
        self.limit = kv.n_ctx // kv.parallel if kv.n_ctx else 0
        self.pos: dict[int, int] = {}
        self.total = len(steps) + greedy
        self.swap_at = len(steps) + greedy // 2 if kv.parallel > 1 and greedy >= 2 else -1

    def prompt(self, seq: int, swapped: bool = False) -> list[int]:
        """Sequence ``seq``'s prompt: the prefill shortened by one token per sequence (two at least), or for the
        sequence started midway the prefill reversed and shorter still."""
        base = self.given[0]
        if swapped:
            base = base[::-1]
        keep = max(2, len(base) - seq - (1 if swapped else 0))
        return base[:keep]

    def n_cells(self) -> int:
        """Cells for the whole run where nothing is shifted (each sequence's tokens, and the swapped one's)."""
        longest = sum(len(s) for s in self.given) + self.greedy
        return max(64, longest * self.kv.parallel + (len(self.given[0]) if self.kv.parallel > 1 else 0) + 8)

    def _token(self, step: Step, seq: int, token: int, row: int | None) -> None:
        pos = self.pos.get(seq, 0)
        if self.limit and pos + 1 > self.limit:  # no room for it in the sequence's share: shift
            keep = min(self.kv.n_keep, pos)
            discard = (pos - keep) // 2
            step.before += [("rm", seq, keep, keep + discard, 0), ("add", seq, keep + discard, pos, -discard)]
            pos -= discard
        step.tokens.append(token)
        step.pos.append(pos)
        step.seqs.append(seq)
        step.from_rows.append(row)
        self.pos[seq] = pos + 1

    def step(self, index: int, last: Step | None, choose: Callable[[int], int]) -> Step:
        """Step ``index``; ``choose(row)`` is the greedy token of row ``row`` of the step before."""
        out = Step([], [], [])
        if index == 0:
            for seq in range(self.kv.parallel):
                for token in (self.given[0] if seq == 0 else self.prompt(seq)):
                    self._token(out, seq, token, None)
            return out
        assert last is not None
        last_row = {seq: row for row, seq in enumerate(last.seqs)}  # each sequence's last token in that batch
        swapped = self.kv.parallel - 1 if index == self.swap_at else None
        if swapped is not None:
            out.before.append(("rm", swapped, -1, -1, 0))
            self.pos[swapped] = 0
        for seq in range(self.kv.parallel):
            if seq == swapped:
                for token in self.prompt(seq, swapped=True):
                    self._token(out, seq, token, None)
            elif index < len(self.given):
                # a given step: sequence 0's ids, and the others' greedy choices
                if seq == 0:
                    for token in self.given[index]:
                        self._token(out, seq, token, None)
                else:
                    self._token(out, seq, choose(last_row[seq]), last_row[seq])
            else:
                self._token(out, seq, choose(last_row[seq]), last_row[seq])
        return out


def _dev_by_name(ggml: ggml_lib.GgmlLib, name: str) -> int:
    for dev in ggml.devices():
        if ggml.ggml_backend_dev_name(dev).decode() == name:
            return dev
    raise ModelLoadError(f"no ggml device {name!r} (have: {', '.join(ggml.device_names())})")


def _bind_extra(ggml: ggml_lib.GgmlLib) -> None:
    for fn_name, restype in (("ggml_op_desc", C.c_char_p), ("ggml_nbytes", C.c_size_t),
                             ("ggml_backend_buffer_name", C.c_char_p)):
        fn = getattr(ggml.base, fn_name)
        fn.restype, fn.argtypes = restype, [C.c_void_p]
    ggml.base.ggml_type_name.restype, ggml.base.ggml_type_name.argtypes = C.c_char_p, [C.c_int]
    ggml.base.ggml_backend_buffer_is_host.restype = C.c_bool
    ggml.base.ggml_backend_buffer_is_host.argtypes = [C.c_void_p]
    ggml.base.ggml_backend_buffer_get_usage.restype = C.c_int
    ggml.base.ggml_backend_buffer_get_usage.argtypes = [C.c_void_p]


BUFFER_USAGE_WEIGHTS = 1  # enum ggml_backend_buffer_usage: llama.cpp marks the model's weight buffers so


class WeightCache:
    """The model's weights read once: a weight is a source of a node in every layer's use and every decode
    step, and holding a copy per use made the capture (steps + 1) times the model. Weights do not change
    during a run, so every node that reads one shares the same (read-only) bytes."""

    def __init__(self) -> None:
        self.tensors: dict[tuple[int, int, int, tuple[int, ...]], CapturedTensor] = {}

    def read(self, ggml: ggml_lib.GgmlLib, ptr: int) -> CapturedTensor:
        t = C.cast(C.c_void_p(ptr), ggml_lib.TENSOR_POINTER).contents
        if not t.buffer or ggml.base.ggml_backend_buffer_get_usage(t.buffer) != BUFFER_USAGE_WEIGHTS:
            return _read(ggml, ptr)
        key = (int(t.buffer), int(t.data or 0), int(t.type), tuple(int(v) for v in (*t.ne, *t.nb)))
        cached = self.tensors.get(key)
        if cached is None:
            cached = self.tensors[key] = _read(ggml, ptr)
            cached.raw.flags.writeable = False  # shared by every node that reads it
        return cached


def _read(ggml: ggml_lib.GgmlLib, ptr: int) -> CapturedTensor:
    t = C.cast(C.c_void_p(ptr), ggml_lib.TENSOR_POINTER).contents
    nbytes = int(ggml.base.ggml_nbytes(ptr))
    raw = np.zeros(nbytes, np.uint8)
    if nbytes and t.buffer:
        ggml.ggml_backend_tensor_get(C.cast(C.c_void_p(ptr), ggml_lib.TENSOR_POINTER), raw.ctypes.data, 0, nbytes)
    return CapturedTensor(
        name=t.name.decode(errors="replace"), dtype=type_name(ggml, int(t.type)),
        ne=tuple(int(v) for v in t.ne), nb=tuple(int(v) for v in t.nb),  # type: ignore[arg-type]
        raw=raw, address=int(t.data or 0), buffer=int(t.buffer or 0), op=(ggml.base.ggml_op_desc(ptr) or b"").decode())


def write_output(ggml: ggml_lib.GgmlLib, node_ptr: int, values: np.ndarray) -> None:
    """Overwrite a node's output on the device (for ``tamper``): float values of a contiguous F32 output, or
    (a uint8 array) the output's bytes as captured (``CapturedTensor.raw`` changed: any type, any strides, a
    quantized KV cache's blocks or an F16 view of it)."""
    data = np.ascontiguousarray(values, np.uint8 if values.dtype == np.uint8 else np.float32)
    nbytes = int(ggml.base.ggml_nbytes(node_ptr))
    if data.nbytes > nbytes:  # ggml would abort the process
        raise ValueError(f"tamper wrote {data.nbytes} bytes into a node of {nbytes}")
    ggml.ggml_backend_tensor_set(C.cast(C.c_void_p(node_ptr), ggml_lib.TENSOR_POINTER), data.ctypes.data, 0,
                                 data.nbytes)


Tamper = Callable[[CapturedNode, Callable[[np.ndarray], None]], None]


def _check_ids(steps: list[list[int]], n_vocab: int, model_path: str | Path) -> None:
    """libllama's decode answers an id outside the vocabulary with -1 and a log line: say which, first."""
    for step_tokens in steps:
        outside = next((t for t in step_tokens if not 0 <= t < n_vocab), None)
        if outside is not None:
            raise ModelLoadError(f"token id {outside} is outside the vocabulary of {model_path} "
                                 f"({n_vocab} tokens: ids 0..{n_vocab - 1})")


def _next(run: ModelRun, next_token: NextToken | None, row: int) -> int:
    return next_token(run, row) if next_token is not None else int(np.argmax(run.logits[-1][row]))


CACHE_TYPES = ("f16", "bf16", "f32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")  # llama.cpp's --cache-type-k/v


def _apply(lib: llama_lib.LlamaLib, ctx: int, op: MemoryOp) -> None:
    kind, seq, p0, p1, delta = op
    if kind == "rm":
        if not lib.seq_rm(ctx, seq, p0, p1):
            raise ModelLoadError(f"llama's seq_rm({seq}, {p0}, {p1}) refused the edit")
    else:
        lib.seq_add(ctx, seq, p0, p1, delta)


def describe_edits(edits: list[MemoryOp]) -> str:
    """A step's KV-cache edits as llama.h names them: ``seq_rm(seq 0, pos [1, 3)); seq_add(seq 0, pos [3, 8), -2)``."""
    out = []
    for kind, seq, p0, p1, delta in edits:
        span = "all" if p0 < 0 and p1 < 0 else f"pos [{p0}, {p1})"
        out.append(f"seq_rm(seq {seq}, {span})" if kind == "rm" else f"seq_add(seq {seq}, {span}, {delta:+d})")
    return "; ".join(out)


def _decode(lib: llama_lib.LlamaLib, ctx: int, step: Step, n_vocab: int, where: str) -> np.ndarray:
    """The step's KV-cache edits, then llama_decode of its batch; the logits of every token (n_tokens, n_vocab)."""
    for op in step.before:
        _apply(lib, ctx, op)
    n = len(step.tokens)
    tok = (C.c_int32 * n)(*step.tokens)
    posv = (C.c_int32 * n)(*step.pos)
    nseq = (C.c_int32 * n)(*([1] * n))
    seq_ids = [(C.c_int32 * 1)(q) for q in step.seqs]
    seqs = (C.POINTER(C.c_int32) * n)(*(C.cast(q, C.POINTER(C.c_int32)) for q in seq_ids))
    outs = (C.c_int8 * n)(*([1] * n))
    rc = lib.lib.llama_decode(ctx, llama_lib.Batch(n, tok, None, posv, nseq, seqs, outs))
    if rc != 0:
        raise ModelLoadError(f"{where}: llama_decode returned {rc}: {lib.last_error()}")
    return np.stack([np.ctypeslib.as_array(lib.lib.llama_get_logits_ith(ctx, i), (n_vocab,)).copy()
                     for i in range(n)])


class _Capture:
    """The eval callback of a capture run: every node's op, op_params, sources (read before it runs) and
    output (after), kept in ``run.nodes`` or handed to ``on_node``."""

    def __init__(self, ggml: ggml_lib.GgmlLib, run: ModelRun, tamper: Tamper | None, progress: TextIO | None,
                 on_node: Callable[[CapturedNode], None] | None) -> None:
        self.ggml, self.run, self.tamper, self.progress, self.on_node = ggml, run, tamper, progress, on_node
        self.step = 0
        self.pending: dict[int, list[CapturedTensor | None]] = {}
        self.weights = WeightCache()
        self.failed: list[BaseException] = []  # what tamper or on_node raised inside the callback

    def observe(self, t: int | None, ask: bool, user: int | None) -> bool:
        if not t:
            return True
        ggml, run = self.ggml, self.run
        tensor = C.cast(C.c_void_p(t), ggml_lib.TENSOR_POINTER).contents
        if ask:
            # the sources now, before the node runs: the allocator may give a node its source's
            # memory (in place), so after it ran the source may hold the output
            srcs = [(self.weights.read(ggml, int(C.cast(s, C.c_void_p).value or 0)) if s else None)
                    for s in tensor.src]
            while srcs and srcs[-1] is None:
                srcs.pop()
            self.pending[t] = srcs
            if self.progress is not None:
                name = tensor.name.decode(errors="replace")
                op = (ggml.base.ggml_op_desc(t) or b"").decode()
                self.progress.write(f"node\t{run.n_nodes}\t{self.step}\t{op}\t{name}\n")
                self.progress.flush()
            return True  # observe every node: the scheduler then runs one node at a time
        if self.failed:
            return False
        node = CapturedNode(index=run.n_nodes, step=self.step, name=tensor.name.decode(errors="replace"),
                            op=(ggml.base.ggml_op_desc(t) or b"").decode(),
                            op_params=bytes(bytearray(tensor.op_params)), srcs=self.pending.pop(t, []),
                            out=_read(ggml, t),
                            backend=(ggml.base.ggml_backend_buffer_name(tensor.buffer) or b"").decode()
                            if tensor.buffer else "",
                            host=bool(tensor.buffer and ggml.base.ggml_backend_buffer_is_host(tensor.buffer)))
        try:
            if self.tamper is not None:
                self.tamper(node, lambda values: write_output(ggml, t, values))
                node.out = _read(ggml, t)
            run.n_nodes += 1
            if self.on_node is None:
                run.nodes.append(node)
            else:
                self.on_node(node)
        except BaseException as exc:  # an exception must not die in the C callback: stop the graph, raise later
            self.failed.append(exc)
            return False
        return True


def run_model(lib_dir: str | None, model_path: str | Path, device: str, steps: list[list[int]],
              capture: bool = False, tamper: Tamper | None = None, threads: int = 1,
              progress: TextIO | None = None, flash_attn: int = llama_lib.FLASH_ATTN_DISABLED,
              greedy: int = 0, next_token: NextToken | None = None, kv: KvOptions | None = None,
              plan: list[Step] | None = None, on_node: Callable[[CapturedNode], None] | None = None) -> ModelRun:
    """Load ``model_path`` on ``device`` (a ggml device name: CPU, Vulkan0, CANN0) and decode ``steps``: the
    first a prefill batch of several token ids, each later one a decode step (one id) that reads the KV
    cache. The ids are given, not sampled, so every device decodes the same sequence. Then ``greedy`` more
    decode steps, each feeding ``next_token(run)`` (the golden's greedy choice, in the model tier; the
    device's own argmax without it). ``progress`` gets a line per node before it runs (index, step, op,
    name), so a crash can be named by the node it died in, and a line before each ``llama_decode`` (step, tokens,
    the KV-cache edits made before it), so a crash in libllama before a step's first node is named by its step.

    ``kv``: the KV cache's types, size (a context shift where it is too small) and sequences (:class:`KvOptions`).
    ``plan``: the batches of an earlier run (its ``plan``), decoded exactly as they were (``steps`` and
    ``greedy`` are then not used): the fused and CPU runs decode the capture run's sequence.

    ``on_node``: with ``capture``, each node is handed to it as it is captured (after ``tamper``), from inside
    the eval callback, and not kept in ``run.nodes``: the model tier judges and replays it there, so the
    capture holds one node at a time and its memory does not grow with the steps. An exception it raises stops
    the graph and is raised again from here once llama_decode returns."""
    lib = llama_lib.load(lib_dir)
    ggml = lib.ggml
    _bind_extra(ggml)
    dev = _dev_by_name(ggml, device)
    devices = (C.c_void_p * 2)(dev, None)
    mp = lib.loading_params(C.cast(devices, C.c_void_p).value)
    lib.log_tail = []
    model = lib.call("model_load", str(model_path).encode(), mp)
    if not model:
        reason = lib.last_error() or "no reason given"
        raise ModelLoadError(f"{model_path}: libllama {lib.version} cannot load it: {reason}")
    run = ModelRun(device=device, logits=[])
    ctx = None
    try:
        buf = C.create_string_buffer(256)
        lib.lib.llama_model_desc(model, buf, 256)
        run.description = buf.value.decode(errors="replace")
        run.n_vocab = lib.n_vocab(model)
        if run.n_vocab <= 0:
            raise ModelLoadError(f"{model_path}: the model reports no vocabulary size")
        _check_ids(steps if plan is None else [p.tokens for p in plan], run.n_vocab, model_path)
        kv = kv or KvOptions()
        planner = Planner(steps, greedy, kv)
        capturing = _Capture(ggml, run, tamper, progress, on_node) if capture else None
        # kept referenced until the context is freed: libllama calls it from every llama_decode
        callback = llama_lib.EVAL_CALLBACK(capturing.observe) if capturing is not None else None
        types = {which: dtypes.GGML_TYPE_ID[name] for which, name in (("k", kv.type_k), ("v", kv.type_v))}
        # the cells asked for: --ctx, else room for the whole run (a replay of a plan is given its run's n_ctx)
        run.n_ctx = kv.n_ctx or planner.n_cells()
        widest = max(len(s) for s in steps) * kv.parallel if plan is None else max(len(p.tokens) for p in plan)
        cp = lib.decoding_params(run.n_ctx, max(8, widest), threads, flash_attn, callback, type_k=types["k"],
                                 type_v=types["v"], n_seq_max=kv.parallel)
        ctx = lib.call("context_new", model, cp)
        if not ctx:
            raise ModelLoadError(f"{model_path}: cannot make a context on {device} (cache K {kv.type_k}, V "
                                 f"{kv.type_v}, flash attention {flash_attn}): {lib.last_error()}")
        n_steps = len(plan) if plan is not None else planner.total
        for step in range(n_steps):
            if plan is not None:
                batch_plan = plan[step]
            else:
                batch_plan = planner.step(step, run.plan[-1] if run.plan else None,
                                          lambda row: _next(run, next_token, row))
            run.plan.append(batch_plan)
            run.steps.append(list(batch_plan.tokens))
            if capturing is not None:
                capturing.step = step
            if progress is not None:  # a crash inside llama_decode before the step's first node is named by this
                progress.write(f"decode\t{step}\t{len(batch_plan.tokens)}\t{describe_edits(batch_plan.before)}\n")
                progress.flush()
            try:
                run.logits.append(_decode(lib, ctx, batch_plan, run.n_vocab, f"{model_path} on {device}"))
            finally:
                if capturing is not None and capturing.failed:
                    raise capturing.failed[0]
        return run
    finally:
        if ctx:
            lib.lib.llama_free(ctx)
        lib.call("model_free", model)
