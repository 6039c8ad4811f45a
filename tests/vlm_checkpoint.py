"""A tiny Idefics3-shaped (SmolVLM's) vision-language checkpoint folder for peer servers,
written without the hub: seeded random weights of transformers'
`Idefics3ForConditionalGeneration` (a SigLIP-like vision tower, a pixel-shuffle connector, a
Llama), a byte-level BPE tokenizer trained here with Idefics3's image markers, and the
processor files (`Idefics3ImageProcessor`'s config, the chat template that puts an `<image>`
where a message has an image part).

Not Qwen2-VL's or LLaVA's shape: vLLM's modules for those import transformers' image
processors that need torchvision, which vLLM's CPU build runs without (docs/peers.md, "Images")."""

from __future__ import annotations

from pathlib import Path

from tests.peer_checkpoint import write_bpe_tokenizer

IMAGE_TOKEN = "<image>"
ROW_COL = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", IMAGE_TOKEN,
           "<global-img>", *ROW_COL]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}<image>{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TILE, PATCH, SCALE = 224, 14, 2  # a tile is (224/14)^2 / 2^2 = 64 image tokens
LONGEST_EDGE = 2 * TILE  # an image is resized to fit 448 px, then split into 224 px tiles


def write_idefics3_checkpoint(out: Path, text_layers: int = 2, hidden: int = 256, vision_layers: int = 2,
                              vision_dim: int = 64, vocab_size: int = 4096) -> Path:
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
        LlamaConfig,
        PreTrainedTokenizerFast,
    )

    out.mkdir(parents=True, exist_ok=True)
    tok = write_bpe_tokenizer(out, vocab_size, SPECIAL)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"), eos_token="<end_of_utterance>",
                                   pad_token="<|endoftext|>")
    image_processor = Idefics3ImageProcessor(size={"longest_edge": LONGEST_EDGE},
                                             max_image_size={"longest_edge": TILE}, do_image_splitting=True)
    Idefics3Processor(image_processor=image_processor, tokenizer=fast,
                      image_seq_len=(TILE // PATCH) ** 2 // SCALE**2,
                      chat_template=CHAT_TEMPLATE).save_pretrained(str(out))
    eos, pad = tok.token_to_id("<end_of_utterance>"), tok.token_to_id("<|endoftext|>")
    config = Idefics3Config(
        vision_config={"hidden_size": vision_dim, "intermediate_size": vision_dim * 4,
                       "num_hidden_layers": vision_layers, "num_attention_heads": vision_dim // 32,
                       "image_size": TILE, "patch_size": PATCH},
        text_config=LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=hidden * 3,
                                num_hidden_layers=text_layers, num_attention_heads=hidden // 64,
                                num_key_value_heads=hidden // 128, max_position_embeddings=4096,
                                bos_token_id=pad, eos_token_id=eos, pad_token_id=pad),
        image_token_id=tok.token_to_id(IMAGE_TOKEN), scale_factor=SCALE,
    )
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(str(out))
    return out


def processor_image_tokens(checkpoint: Path, width: int, height: int) -> int:
    """The tokens transformers' own processor of the checkpoint expands one `<image>` of this
    size into (its tiles' image tokens and their markers): what one image adds to a prompt."""
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(checkpoint))
    return len(processor(text=IMAGE_TOKEN, images=[[Image.new("RGB", (width, height))]])["input_ids"][0])
