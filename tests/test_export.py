"""llmperf-export: a preset as a checkpoint folder that transformers and the reference engine
load to the same weights, with a trained BPE tokenizer of the model's vocabulary size."""

from __future__ import annotations

import json

import pytest
import torch

from engines.reference import ReferenceEngine
from llmperf.export.checkpoint import export_checkpoint
from llmperf.export.cli import main
from llmperf.export.tokenizer import train_tokenizer

PROMPT_TEXTS = ["How do I keep a sourdough starter alive?", "Plant the seeds in spring."]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "exported-tiny"
    assert main(["model=tiny", f"out={out}"]) == 0
    return out


def test_export_writes_every_file_a_hugging_face_loader_reads(tiny_checkpoint):
    names = sorted(p.name for p in tiny_checkpoint.iterdir())
    assert names == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["vocab_size"], config["num_hidden_layers"], config["hidden_size"]) == (
        512,
        4,
        256,
    )
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 0)


def test_exported_weights_are_the_presets_seeded_weights(tiny_checkpoint):
    ids = [5, 17, 300, 42, 9]
    from_preset = ReferenceEngine(model="tiny", seed=0).logits(ids)
    from_folder = ReferenceEngine(model=str(tiny_checkpoint)).logits(ids)
    assert torch.equal(from_preset, from_folder)


def test_transformers_and_the_reference_engine_agree_token_for_token(tiny_checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    hf = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # run on through EOS, as ignore_eos does
    reference = ReferenceEngine(model=str(tiny_checkpoint), precision="fp32")
    for text in PROMPT_TEXTS:
        ids = tok(text)["input_ids"]
        assert ids[0] == 1 and len(ids) > 3  # BOS first, then BPE pieces
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=24,
                do_sample=False,
                pad_token_id=0,
            )
        hf_tokens = out[0, len(ids) :].tolist()
        ours = reference.generate([ids], max_tokens=24, ignore_eos=True)[0].token_ids
        assert list(ours) == hf_tokens


def test_the_tokenizer_round_trips_text_and_renders_the_chat_template(tiny_checkpoint):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    assert len(tok) == 512
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 0)
    text = PROMPT_TEXTS[0]
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<s>user: hi</s>\nassistant:"


def test_a_vocabulary_larger_than_the_text_yields_is_filled_with_reserved_tokens():
    tok = train_tokenizer(1500)
    assert tok.get_vocab_size() == 1500
    vocab = tok.get_vocab()
    trained = [t for t in vocab if not t.startswith("<|reserved_")]
    assert 512 < len(trained) < 1500
    assert vocab[f"<|reserved_{len(trained)}|>"] == len(trained)
    assert vocab["<|reserved_1499|>"] == 1499


@pytest.mark.parametrize(
    "argv, message",
    [
        (["model=nope", "out=x"], "model='nope': no such preset; valid: tiny"),
        (["model=tiny"], "missing out=..."),
        (["model=tiny", "out=x", "seed=a"], "seed='a': not an integer"),
        (["model=tiny", "out=x", "colour=red"], "unknown argument 'colour'"),
        (["model=tiny", "out=x", "force=maybe"], "force='maybe': valid: true, false"),
    ],
)
def test_bad_arguments_print_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_folder_with_files_is_kept_unless_force(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["model=tiny", f"out={tmp_path}"]) == 2
    assert "exists and is not empty; pass force=true" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert main(["model=tiny", f"out={tmp_path}", "force=true"]) == 0
    assert (tmp_path / "model.safetensors").is_file()


def test_a_preset_too_large_for_memory_is_refused_before_allocating(tmp_path):
    with pytest.raises(ValueError, match="needs about .* GB of memory"):
        export_checkpoint("llama-3.1-70b", tmp_path / "big")


def test_a_run_on_a_checkpoint_is_titled_with_its_folder_and_parameter_count(
    compose_config, tiny_checkpoint, tmp_path
):
    import io

    from rich.console import Console

    from llmperf.run.runner import run_benchmark

    overrides = [
        f"model.path={tiny_checkpoint}",
        "scenario.num_requests=4",
        "scenario.warmup_requests=0",
        "scenario.output_tokens.dist=fixed",
        "scenario.output_tokens.value=4",
        "telemetry.enabled=false",
        "report.enabled=false",
    ]
    console = Console(file=io.StringIO(), width=120)
    run = run_benchmark(compose_config(*overrides), tmp_path, console=console)
    assert (
        run.summary["model"]["label"] == "exported-tiny (3.3M)"
    )  # the folder's name, not the default preset's
    assert "chat on reference / exported-tiny (3.3M): 4/4" in console.file.getvalue()  # the title may wrap
