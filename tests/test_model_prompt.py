"""conform model with prompts as users run them: text through the model's own tokenizer (libllama's
llama_tokenize, the chat template by llama_chat_apply_template), greedy decoding that feeds the golden's
token, the --decode limit, and an id outside the vocabulary.

Runs ggml 0.25.1's libllama from ``.backends/ggml-0.25.1-vulkan`` on its CPU device, on the synthetic tiny
llama written with a real byte-level BPE vocabulary (``write_tiny_model(..., vocab=True)``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.model_tier_support import LIB, ROOT, conform_model, needs_libllama, subprocess_env

_env = subprocess_env


@pytest.fixture(scope="module")
def vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conformance.model_synthetic import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("vocab") / "tiny-vocab.gguf", "llama", "q8_0", seed=5,
                            vocab=True)


def gguf_text(path: Path, ids: list[int]) -> bytes:
    """The ids' bytes read from the GGUF's own token list with gguf-py (a path independent of libllama):
    GPT-2's byte-level pieces mapped back to bytes; control tokens as their text."""
    import gguf

    from conformance.model_synthetic import byte_level_vocab

    field = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode() for i in field.data]
    assert tokens == byte_level_vocab()[0]
    to_byte = {tokens[b]: b for b in range(256)}
    out = b""
    for t in ids:
        piece = tokens[t]
        out += piece.encode() if piece.startswith("<|") else bytes(to_byte[c] for c in piece)
    return out


@needs_libllama
def test_a_prompt_is_tokenized_by_the_models_own_tokenizer(tmp_path: Path, vocab_model: Path) -> None:
    from conformance.model_synthetic import byte_level_vocab

    _, _, _, special = byte_level_vocab()
    proc = conform_model(str(vocab_model), "--prompt", "hello world", "--decode", "1", "--no-cpu",
                         "--out", str(tmp_path / "plain"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((tmp_path / "plain" / "model.json").read_text())
    prefill = record["fed_tokens"][0]
    assert record["prompt"] == "hello world"
    # the model's BOS first (add_bos_token), then the text: the same bytes by the GGUF's own token list, in
    # fewer tokens than bytes (the merges applied: a tokenizer, not a byte dump)
    assert prefill[0] == special["eos"]  # the tiny vocabulary's BOS is <|endoftext|>
    assert gguf_text(vocab_model, prefill[1:]) == b"hello world"
    assert len(prefill) - 1 < len("hello world")
    assert f"-> {len(prefill)} tokens {prefill}" in proc.stdout
    # and libllama's own round trip (llama_token_to_piece of each id) gives the text back after the BOS
    code = (f"import json\nfrom device.llama.tokenizer import read_vocabulary\n"
            f"v = read_vocabulary({str(LIB)!r}, {str(vocab_model)!r}, 'hello world')\n"
            f"print(json.dumps([v.prompt_ids, v.detokenized.decode()]))")
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(),
                           timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    ids, detokenized = json.loads(probe.stdout.strip().splitlines()[-1])
    assert ids == prefill and detokenized == "<|endoftext|>hello world"

    chat = conform_model(str(vocab_model), "--prompt", "hello world", "--chat", "--decode", "1", "--no-cpu",
                         "--out", str(tmp_path / "chat"))
    assert chat.returncode == 0, chat.stdout[-2000:] + chat.stderr[-2000:]
    chat_record = json.loads((tmp_path / "chat" / "model.json").read_text())
    laid_out = "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"  # ChatML, the model's template
    assert chat_record["prompt"] == laid_out
    chat_ids = chat_record["fed_tokens"][0]
    assert chat_ids.count(special["im_start"]) == 2 and special["im_end"] in chat_ids  # control tokens, not text
    assert gguf_text(vocab_model, chat_ids[1:]) == laid_out.encode()


@needs_libllama
def test_a_model_with_a_tokenizer_gets_a_real_default_prompt(tmp_path: Path, vocab_model: Path) -> None:
    from conformance.cli.model import DEFAULT_PROMPT

    proc = conform_model(str(vocab_model), "--decode", "0", "--no-cpu", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "model.json").read_text())
    assert record["prompt"] == DEFAULT_PROMPT
    assert gguf_text(vocab_model, record["fed_tokens"][0][1:]) == DEFAULT_PROMPT.encode()


@needs_libllama
def test_greedy_decoding_feeds_the_goldens_token_not_the_devices(tmp_path: Path, vocab_model: Path) -> None:
    """The capture run's logits are overwritten on the device after the prefill so that its argmax is token
    7; the golden's forward pass (its own values) is untouched, so the token fed next must be the golden's
    argmax, not 7, and every later run decodes the same ids. Both choices are checked by a second path: a
    fresh capture of the fed ids replayed whole by the golden, and a fresh fused run's own argmax."""
    code = f"""
        import json
        from pathlib import Path
        import numpy as np
        from conformance.model import check_model

        planted = 7
        def tamper(node, write):
            if node.name == "result_output" and node.step == 0:
                values = node.out.values().astype(np.float32).reshape(-1, node.out.ne[0])
                values[-1, planted] = values.max() + 100.0
                write(values)
        verdict = check_model({str(vocab_model)!r}, "CPU", {str(LIB)!r}, [[270, 104, 101, 108]],
                              Path({str(tmp_path / "out")!r}), with_cpu=False, tamper=tamper, greedy=5)
        fed = verdict.fed
        from device.llama.capture import run_model
        from conformance.model import golden_replay
        golden, gaps = golden_replay(run_model({str(LIB)!r}, {str(vocab_model)!r}, "CPU", fed, capture=True))
        fused = run_model({str(LIB)!r}, {str(vocab_model)!r}, "CPU", fed)
        record = verdict.as_dict()
        record["second_path"] = {{"gaps": gaps,
                                 "golden": [int(np.argmax(g[-1])) for g in golden[:-1]],
                                 "device": [int(np.argmax(d[-1])) for d in fused.logits[:-1]]}}
        print(json.dumps(record, default=str))
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    decode = record["decode"]
    assert [d["step"] for d in decode] == [1, 2, 3, 4, 5]
    assert record["fed_tokens"][1:] == [[d["fed"]] for d in decode]
    assert all(d["fed"] == d["golden"] for d in decode)  # the golden's greedy token, every step
    assert decode[0]["fed"] != 7  # not the (planted) device argmax of the capture run
    # the planted logits row is where the capture run's node-by-node verdict fails, at the output product
    assert record["first_failure"]["name"] == "result_output" and record["first_failure"]["step"] == 0
    # the device's own choice (the fused run, untouched) is reported beside the fed one
    assert all(d["device_from"] == "fused run on CPU" for d in decode)
    second = record["second_path"]
    assert not second["gaps"]
    assert second["golden"] == [d["fed"] for d in decode]
    assert second["device"] == [d["device"] for d in decode]
    differ = [d for d in decode if d["device"] != d["golden"]]
    assert record["first_divergence"] == (differ[0] if differ else None)


def test_the_first_step_where_the_devices_choice_differs_is_the_finding() -> None:
    from conformance.model import DecodeStep, ModelVerdict

    verdict = ModelVerdict("m.gguf", "CPU", "tiny")
    verdict.decode = [DecodeStep(1, 40, 40, 40, "fused run on CPU"), DecodeStep(2, 41, 41, 9, "fused run on CPU"),
                      DecodeStep(3, 42, 42, 8, "fused run on CPU")]
    assert verdict.first_divergence is verdict.decode[1]
    assert verdict.as_dict()["first_divergence"]["step"] == 2
    verdict.decode = verdict.decode[:1]
    assert verdict.first_divergence is None


def test_decode_takes_512_steps_and_refuses_past_its_limit() -> None:
    from conformance.cli.model import MAX_DECODE, ModelUsageError, _check_prompt_args, build_parser

    assert MAX_DECODE >= 512
    _check_prompt_args(build_parser().parse_args(["--arch", "llama", "--decode", "512"]))
    with pytest.raises(ModelUsageError, match=f"between 0 and {MAX_DECODE}"):
        _check_prompt_args(build_parser().parse_args(["--arch", "llama", "--decode", str(MAX_DECODE + 1)]))


@needs_libllama
def test_bad_prompts_and_ids_are_one_line_and_exit_2(tmp_path: Path, vocab_model: Path) -> None:
    cases = {
        ("--arch", "llama", "--tokens", "1,5,300"): "token id 300 is outside the vocabulary of",
        (str(vocab_model), "--tokens", "1,271"): "token id 271 is outside the vocabulary of",
        ("--arch", "llama", "--prompt", "hello"): "has no tokenizer",
        ("--arch", "llama", "--tokens", "1,2", "--prompt", "x"): "--tokens gives ids",
        (str(vocab_model), "--prompt-file", str(tmp_path / "absent.txt")): "--prompt-file",
    }
    sizes = {"300": "(128 tokens", "271": "(271 tokens"}
    for args, message in cases.items():
        proc = conform_model(*args, "--out", str(tmp_path / "out"))
        assert proc.returncode == 2, (args, proc.stdout[-500:], proc.stderr[-1500:])
        lines = [line for line in proc.stderr.splitlines() if line.startswith("conform model:")]
        assert len(lines) == 1 and message in lines[0], (args, proc.stderr[-1500:])
        for token, size in sizes.items():
            if f"token id {token}" in message:
                assert size in lines[0], lines[0]
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "out" / "model.json").exists()
