"""Any OpenAI-compatible server from `engine.launch.command`, whose items may name `{host}`,
`{port}` and `{model}`; `engine.launch.args` are appended as `--kebab-case` options."""

from __future__ import annotations

from engines.launch.base import ServerFamily


class Generic(ServerFamily):
    name = "generic"
    serves_presets = True  # its command may not name {model} at all

    def default_binary(self) -> str | None:
        return self.options.command[0] if self.options.command else None

    def command(self, model: str, host: str, port: int) -> list[str]:
        filled = [
            part.format(host=host, port=port, model=model) for part in self.options.command[1:]
        ]
        return [self.binary, *filled, *self.format_args(self.args())]
