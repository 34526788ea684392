"""Checks of Python values on their way into the engine, with errors that name the value.

pybind11 refuses a value of the wrong type (or an int too large for the C++ field) with a
TypeError that names neither the field nor the problem; these helpers say both.
"""

import json
import re
from typing import Any


def set_field(target: Any, where: str, name: str, value: Any):
    """setattr(target, name, value) for a bound C++ struct. `where` names the field in errors
    ("SamplingParams.top_k"). ValueError: an int out of the field's range, text that is not
    Unicode; TypeError: any other value pybind11 refuses."""
    try:
        setattr(target, name, value)
    except TypeError as e:
        wanted = re.search(r"arg0: (.+?)\) -> None", str(e))
        raise field_error(where, value, wanted.group(1) if wanted else "another type") from None


def field_error(where: str, value: Any, wanted: str) -> Exception:
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, str):
            unicode_error = not_unicode(item)
            if unicode_error:
                return ValueError(f"{where}: {unicode_error}")
        if isinstance(item, int) and not isinstance(item, bool) and (
                "int" in wanted or "float" in wanted):
            return ValueError(f"{where}: {item} is out of range")
    return TypeError(f"{where} must be {wanted}, got {type(value).__name__} {short(value)}")


def not_unicode(text: str) -> str:
    """Why `text` cannot become UTF-8 (a lone surrogate), or "" when it can."""
    try:
        text.encode("utf-8")
        return ""
    except UnicodeEncodeError as e:
        return (f"the text is not valid Unicode: a lone surrogate {text[e.start]!r} at "
                f"character {e.start}")


def check_text(where: str, text: str) -> str:
    problem = not_unicode(text)
    if problem:
        raise ValueError(f"{where}: {problem}")
    return text


def to_json(where: str, value: Any) -> str:
    """JSON text of `value` for the engine (the chat template's messages and variables).
    ValueError: NaN or infinity, text that is not Unicode; TypeError: a value JSON lacks."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except TypeError as e:
        raise TypeError(f"{where}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{where}: {e} (NaN or infinity)") from None
    return check_text(where, text)


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
