"""The model's tokenizer, with the names of Hugging Face's (encode, decode,
apply_chat_template). It is the engine's own C++ tokenizer: the ids are those generate()
uses.
"""

from typing import Any, Dict, List, Optional, Union

from ._checks import check_text, to_json

Messages = List[Dict[str, Any]]


class Tokenizer:
    def __init__(self, engine):
        self._engine = engine  # keeps the model alive as long as the tokenizer

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._engine.encode(check_text("text", text), add_special_tokens)

    def decode(self, token_ids: List[int], skip_special_tokens: bool = True) -> str:
        return self._engine.decode(list(token_ids), skip_special_tokens)

    def apply_chat_template(self, messages: Messages, tokenize: bool = False,
                            add_generation_prompt: bool = True,
                            continue_final_message: bool = False,
                            chat_template: Optional[str] = None,
                            tools: Optional[List[Dict[str, Any]]] = None,
                            **kwargs) -> Union[str, List[int]]:
        """Renders messages with the model's chat template (or `chat_template`, Jinja
        source), as transformers' method of the name does: `tools` and the other keyword
        arguments become template variables (enable_thinking=False, ...);
        continue_final_message=True (with add_generation_prompt=False) ends the text inside
        the last message, for the model to continue it. ValueError when the model has no
        template, the template fails, or the last message cannot be continued."""
        if not isinstance(add_generation_prompt, bool) or not isinstance(continue_final_message, bool):
            raise TypeError("add_generation_prompt and continue_final_message must be bools")
        if chat_template is not None and not isinstance(chat_template, str):
            raise TypeError(f"chat_template must be a str (Jinja source) or None, "
                            f"got {type(chat_template).__name__}")
        if tools is not None:
            kwargs["tools"] = tools
        text = self._engine.apply_chat_template(
            to_json("messages", messages), add_generation_prompt,
            to_json("chat template variables", kwargs), continue_final_message,
            check_text("chat_template", chat_template or ""))
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def vocab_size(self) -> int:
        return self._engine.vocab_size
