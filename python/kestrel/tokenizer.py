"""The model's tokenizer, with the names of Hugging Face's (encode, decode,
apply_chat_template). It is the engine's own C++ tokenizer: the ids are those generate()
uses.
"""

import json
from typing import Any, Dict, List, Union

Messages = List[Dict[str, Any]]


class Tokenizer:
    def __init__(self, engine):
        self._engine = engine  # keeps the model alive as long as the tokenizer

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return self._engine.encode(text, add_special_tokens)

    def decode(self, token_ids: List[int], skip_special_tokens: bool = True) -> str:
        return self._engine.decode(list(token_ids), skip_special_tokens)

    def apply_chat_template(self, messages: Messages, tokenize: bool = False,
                            add_generation_prompt: bool = True,
                            **kwargs) -> Union[str, List[int]]:
        """Renders messages with the model's chat template; keyword arguments become template
        variables (enable_thinking=False, tools=[...]). ValueError when the model has no
        template or it fails."""
        text = self._engine.apply_chat_template(json.dumps(messages), add_generation_prompt,
                                                json.dumps(kwargs))
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def vocab_size(self) -> int:
        return self._engine.vocab_size
