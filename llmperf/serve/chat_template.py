"""Chat messages to prompt text: the checkpoint's Jinja chat template, or a plain default.

A checkpoint folder's `tokenizer_config.json` may hold `chat_template` (a Jinja
string, or a list of named templates; "default" is used). It is rendered as
transformers renders it: `messages`, `add_generation_prompt=True`, `bos_token`,
`eos_token`, and `raise_exception`. Presets and checkpoints without one get
DEFAULT_CHAT_TEMPLATE: one `role: content` line per message, then `assistant:`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message.role }}: {{ message.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def load_chat_template(checkpoint_dir: str | Path | None) -> tuple[str, dict[str, str]]:
    """(template source, special token strings) for a checkpoint folder, or the default."""
    config_file = Path(checkpoint_dir) / "tokenizer_config.json" if checkpoint_dir else None
    if config_file is None or not config_file.is_file():
        return DEFAULT_CHAT_TEMPLATE, {}
    config = json.loads(config_file.read_text(encoding="utf-8"))
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default")
    tokens = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
    return template or DEFAULT_CHAT_TEMPLATE, tokens


def _token_text(token) -> str:
    if isinstance(token, dict):  # {"content": "<s>", "lstrip": false, ...}
        return token.get("content", "")
    return token or ""


def compile_chat_template(
    source: str, special_tokens: dict[str, str]
) -> Callable[[list[dict]], str]:
    """A function rendering a message list to prompt text with the generation prompt appended."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True
    )
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)

    def render(messages: list[dict]) -> str:
        return template.render(messages=messages, add_generation_prompt=True, **special_tokens)

    return render
