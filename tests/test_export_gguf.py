"""llmperf-export format=gguf: a preset or a checkpoint folder as one GGUF file for llama.cpp.

The default run reads each written file back with the `gguf` package's reader: the
hyper-parameters under llama.cpp's keys, every tensor's name, shape and values against the
checkpoint's (Q/K rows un-permuted from llama.cpp's rope layout; f16 and q8_0 within their
rounding), and the tokenizer in the file, rebuilt, encoding as the exported one does.

The `peer` test (`python -m pytest -m peer`) starts llama.cpp's `llama-server`, built by
scripts/install-llama-cpp.sh, on the exported files and compares its greedy tokens with the
reference engine's (fp32). Without the binary it fails, naming the script.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from llmperf.export.cli import main
from llmperf.export.gguf_file import GGUF_TYPES, export_gguf, permute_rope, unpermute_rope

gguf = pytest.importorskip("gguf", reason='format=gguf needs gguf: pip install -e ".[llama]"')

PRESET = "tiny"
TEXTS = [
    "How do I keep a sourdough starter alive through the winter?",
    "Plant the seeds in spring, water them twice a week, and wait.",
    "Write a short note to a neighbour about a lost cat: it's grey, 3 years old!",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{type: path} for the tiny preset, plus the preset's checkpoint folder as "hf"."""
    root = tmp_path_factory.mktemp("gguf")
    files = {}
    for t in GGUF_TYPES:
        files[t] = root / f"{PRESET}-{t}.gguf"
        assert main(["format=gguf", f"model={PRESET}", f"out={files[t]}", f"type={t}"]) == 0
    files["hf"] = root / PRESET
    assert main([f"model={PRESET}", f"out={files['hf']}"]) == 0
    return files


def _fields(reader) -> dict:
    return {k: f.contents() for k, f in reader.fields.items()}


def _checkpoint_tensors(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def _hf_name(name: str) -> str:
    from llmperf.export.gguf_file import GLOBAL_TENSORS, LAYER_TENSORS

    back = {v: k for k, v in GLOBAL_TENSORS.items()}
    if name in back:
        return back[name]
    _, layer, short, suffix = name.split(".")
    hf = {v: k for k, v in LAYER_TENSORS.items()}[short]
    return f"model.layers.{layer}.{hf}.{suffix}"


def test_the_hyper_parameters_are_under_llama_cpps_keys(exported):
    config = json.loads((exported["hf"] / "config.json").read_text())
    for t, file_type in (("f32", 0), ("f16", 1), ("q8_0", 7)):
        fields = _fields(gguf.GGUFReader(exported[t]))
        assert fields["general.architecture"] == "llama"
        assert fields["general.file_type"] == file_type
        assert fields["llama.context_length"] == config["max_position_embeddings"]
        assert fields["llama.embedding_length"] == config["hidden_size"]
        assert fields["llama.block_count"] == config["num_hidden_layers"]
        assert fields["llama.feed_forward_length"] == config["intermediate_size"]
        assert fields["llama.attention.head_count"] == config["num_attention_heads"]
        assert fields["llama.attention.head_count_kv"] == config["num_key_value_heads"]
        assert fields["llama.rope.freq_base"] == config["rope_theta"]
        assert fields["llama.rope.dimension_count"] == config["head_dim"]
        assert fields["llama.vocab_size"] == config["vocab_size"]
        assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(
            config["rms_norm_eps"]
        )


@pytest.mark.parametrize("t", GGUF_TYPES)
def test_every_tensor_is_the_checkpoints_in_llama_cpps_layout(exported, t):
    config = json.loads((exported["hf"] / "config.json").read_text())
    expected = _checkpoint_tensors(exported["hf"])
    reader = gguf.GGUFReader(exported[t])
    names = {tensor.name for tensor in reader.tensors}
    assert "token_embd.weight" in names and "output_norm.weight" in names
    assert "output.weight" in names  # tiny's head is not tied
    assert "blk.0.attn_q.weight" in names and "blk.3.ffn_down.weight" in names
    assert len(names) == len(expected)
    q = gguf.GGMLQuantizationType
    for tensor in reader.tensors:
        want = expected[_hf_name(tensor.name)]
        assert tuple(int(n) for n in tensor.shape) == tuple(reversed(want.shape))  # ggml order
        got = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        got = got.reshape(want.shape)
        if ".attn_q." in tensor.name:
            got = unpermute_rope(got, config["num_attention_heads"])
        elif ".attn_k." in tensor.name:
            got = unpermute_rope(got, config["num_key_value_heads"])
        if want.ndim == 1 or t == "f32":
            assert tensor.tensor_type == q.F32
            np.testing.assert_array_equal(got, want)
        elif t == "f16":
            assert tensor.tensor_type == q.F16
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
        else:
            assert tensor.tensor_type == q.Q8_0
            # each block of 32: int8 steps of amax/127 (half a step off at most), an f16 scale
            blocks = want.reshape(-1, 32)
            step = np.abs(blocks).max(axis=1, keepdims=True) / 127
            err = np.abs(got.reshape(-1, 32) - blocks)
            assert (err <= 0.51 * step + 1e-3 * np.abs(blocks)).all()
            assert err.mean() < 0.3 * step.mean()


def test_a_checkpoint_folder_exports_to_the_presets_file(exported, tmp_path):
    out = tmp_path / "from-folder.gguf"
    assert main(["format=gguf", f"model.path={exported['hf']}", f"out={out}", "type=f32"]) == 0
    a, b = gguf.GGUFReader(exported["f32"]), gguf.GGUFReader(out)
    fa, fb = _fields(a), _fields(b)
    fa.pop("general.name"), fb.pop("general.name")
    assert fa == fb
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        assert ta.name == tb.name
        np.testing.assert_array_equal(ta.data, tb.data)


def test_q_and_k_rows_are_permuted_to_llama_cpps_rope(exported):
    """Rotating permuted Q the way llama.cpp does (adjacent pairs) is rotating Q the way
    transformers does (halves), rows permuted: the file's rope layout is the model's."""
    heads, dim, hidden, pos, theta = 4, 16, 24, 7, 10000.0
    w = torch.randn(heads * dim, hidden, dtype=torch.float64)
    x = torch.randn(hidden, dtype=torch.float64)
    freqs = pos / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    cos, sin = freqs.cos(), freqs.sin()

    def rope_halves(q):  # transformers: pairs (i, i + dim/2)
        q = q.view(heads, dim)
        a, b = q[:, : dim // 2], q[:, dim // 2 :]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=1).reshape(-1)

    def rope_adjacent(q):  # llama.cpp's normal rope: pairs (2i, 2i + 1)
        q = q.view(heads, dim // 2, 2)
        a, b = q[..., 0], q[..., 1]
        return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(-1)

    permuted = torch.from_numpy(permute_rope(w.numpy(), heads))
    got = rope_adjacent(permuted @ x)
    want = torch.from_numpy(permute_rope(rope_halves(w @ x).numpy()[:, None], heads))[:, 0]
    torch.testing.assert_close(got, want)
    np.testing.assert_array_equal(unpermute_rope(permute_rope(w.numpy(), heads), heads), w.numpy())


def _tokenizer_from_gguf(path: Path):
    """A `tokenizers` BPE rebuilt from the file's tokenizer.ggml.* fields alone."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    fields = _fields(gguf.GGUFReader(path))
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "gpt-2"
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ")) for m in fields["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    control = gguf.TokenType.CONTROL
    tok.add_special_tokens(
        [AddedToken(t, special=True) for t, k in zip(tokens, types, strict=True) if k == control]
    )
    return tok, fields


def test_the_tokenizer_in_the_file_round_trips(exported):
    from tokenizers import Tokenizer

    exported_tok = Tokenizer.from_file(str(exported["hf"] / "tokenizer.json"))
    tok, fields = _tokenizer_from_gguf(exported["q8_0"])
    assert len(fields["tokenizer.ggml.tokens"]) == exported_tok.get_vocab_size() == 512
    assert fields["tokenizer.ggml.bos_token_id"] == 1
    assert fields["tokenizer.ggml.eos_token_id"] == 2
    assert fields["tokenizer.ggml.padding_token_id"] == 0
    assert fields["tokenizer.ggml.add_bos_token"] is True
    assert fields["tokenizer.ggml.tokens"][:3] == ["<pad>", "<s>", "</s>"]
    assert list(fields["tokenizer.ggml.token_type"][:4]) == [3, 3, 3, 1]
    assert "{{ bos_token }}" in fields["tokenizer.chat_template"]
    for text in TEXTS + ["<s>", "naïve café — 10%"]:
        ids = tok.encode(text).ids
        assert [1] + ids == exported_tok.encode(text).ids  # the file's bos, then the same ids
        assert tok.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["format=gguf", "model=tiny", "out=x.gguf", "type=q4_0"],
            "type='q4_0': valid: f32, f16, q8_0",
        ),
        (["format=gguf", "model=tiny", "out=x"], "format=gguf writes one file, out=PATH.gguf"),
        (["format=onnx", "model=tiny", "out=x"], "format='onnx': valid: hf, gguf"),
        (["model=tiny", "out=x", "type=f16"], "type= needs format=gguf"),
        (["format=gguf", "out=x.gguf"], "format=gguf takes model=PRESET or model.path=DIR"),
        (["format=gguf", "model.path=/nonexistent", "out=x.gguf"], "is not a folder"),
    ],
)
def test_bad_gguf_arguments_print_one_line_and_exit_2(argv, message, capsys, tmp_path):
    argv = [a.replace("out=x", f"out={tmp_path}/x") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_an_existing_file_is_kept_unless_force(tmp_path, capsys):
    out = tmp_path / "mine.gguf"
    out.write_bytes(b"mine")
    assert main(["format=gguf", "model=tiny", f"out={out}"]) == 2
    assert "exists; pass force=true" in capsys.readouterr().err
    assert out.read_bytes() == b"mine"
    assert main(["format=gguf", "model=tiny", f"out={out}", "force=true"]) == 0
    assert gguf.GGUFReader(out).fields["general.architecture"].contents() == "llama"
    assert not (tmp_path / "mine.gguf.partial").exists()


def test_a_tokenizer_llama_cpp_cannot_name_is_refused(exported, tmp_path):
    import shutil

    folder = tmp_path / "odd"
    shutil.copytree(exported["hf"], folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {"type": "Whitespace"}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ValueError, match="none llama.cpp knows by name"):
        export_gguf(tmp_path / "odd.gguf", checkpoint=folder)
    assert not (tmp_path / "odd.gguf").exists()


# -- against llama.cpp's llama-server ---------------------------------------------------------

GREEDY_TOKENS = 16
INSTALL = "scripts/install-llama-cpp.sh"


def llama_server_binary() -> Path:
    """The llama-server scripts/install-llama-cpp.sh builds; pytest.fail naming the script
    when it is not there (the peer test does not skip silently)."""
    from engines.launch.llama_cpp import built_binary

    binary = built_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(
            f"no llama-server at {binary}: build it with {INSTALL} (8-9 minutes on 2 cores)"
        )
    return binary


def _greedy_reference(prompts: list[list[int]]) -> list[list[int]]:
    from engines.reference import ReferenceEngine

    reference = ReferenceEngine(model=PRESET, precision="fp32")
    outputs = reference.generate(prompts, max_tokens=GREEDY_TOKENS, ignore_eos=True)
    return [list(o.token_ids) for o in outputs]


def _llama_cpp_greedy(binary: Path, model: Path, prompts, log: Path) -> tuple[list, list]:
    import httpx

    from engines.launch.options import LaunchOptions
    from engines.launch.server import ManagedServer

    options = LaunchOptions(
        family="llama.cpp",
        binary=str(binary),
        args={"ctx_size": 512, "threads": 2, "parallel": 1},
        ready_timeout_s=300,
    )
    got, tokenized = [], []
    with ManagedServer(options, str(model), log) as server:
        root = server.base_url.removesuffix("/v1")
        for text in TEXTS:
            r = httpx.post(f"{root}/tokenize", json={"content": text, "add_special": True})
            assert r.status_code == 200, r.text
            tokenized.append(r.json()["tokens"])
        for ids in prompts:
            body = {
                "prompt": ids,
                "n_predict": GREEDY_TOKENS,
                "temperature": 0.0,
                "top_k": 1,
                "ignore_eos": True,
                "cache_prompt": False,
                "return_tokens": True,
            }
            r = httpx.post(f"{root}/completion", json=body, timeout=120)
            assert r.status_code == 200, r.text
            got.append(r.json()["tokens"])
    return got, tokenized


def _agreement(got: list[list[int]], want: list[list[int]]) -> tuple[float, list[int]]:
    """Per prompt, the tokens equal to the reference's before the first difference (after
    it the two continue different texts), and their share of all the reference's tokens."""
    prefixes = []
    for g, w in zip(got, want, strict=True):
        n = 0
        while n < min(len(g), len(w)) and g[n] == w[n]:
            n += 1
        prefixes.append(n)
    return sum(prefixes) / sum(len(w) for w in want), prefixes


@pytest.mark.peer
def test_llama_server_decodes_the_reference_engines_greedy_tokens(exported, tmp_path):
    from tokenizers import Tokenizer

    binary = llama_server_binary()
    tok = Tokenizer.from_file(str(exported["hf"] / "tokenizer.json"))
    prompts = [tok.encode(t).ids for t in TEXTS]
    want = _greedy_reference(prompts)
    figures = {}
    for t in GGUF_TYPES:
        got, tokenized = _llama_cpp_greedy(binary, exported[t], prompts, tmp_path / f"{t}.log")
        assert tokenized == prompts, "llama.cpp tokenizes the text as the exported tokenizer"
        figures[t] = _agreement(got, want)
        print(
            f"llama.cpp {t} vs reference fp32: {figures[t][0]:.0%} of tokens, "
            f"agreeing prefixes {figures[t][1]}"
        )
        if t in ("f32", "f16"):
            assert got == want, f"{t}: agreeing prefixes {figures[t][1]} of {GREEDY_TOKENS}"
    report = os.environ.get("LLMPERF_GGUF_AGREEMENT")
    if report:
        Path(report).write_text(json.dumps(figures, indent=2) + "\n")
    # q8_0 rounds every weight: greedy paths part where the reference's top two logits are
    # close (on tiny, 41 of 48 tokens agree); a wrong q8_0 layout would agree on almost none
    assert figures["q8_0"][0] >= 0.5
