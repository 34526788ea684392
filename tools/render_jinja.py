#!/usr/bin/env python3
"""Render chat templates with Python's jinja2 the way Hugging Face transformers does.

This is the oracle the C++ chat-template renderer (src/chat/) is tested against.

The environment matches transformers' `_compile_jinja_template`: an
ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the loopcontrols
extension, the `generation` tag (rendered as its body), `tojson` replaced by
json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys),
and the globals raise_exception(message) and strftime_now(format).

Input on stdin, either
  - one job  {"template": "...", "context": {...}}: prints the rendered text
    (exit status 1 and the error on stderr when jinja2 raises), or
  - a JSON array of jobs: prints a JSON array with, per job, {"ok": true, "output": "..."}
    or {"ok": false, "error": "<ExceptionType>: <message>"}.

The context's keys become the template's variables (`template.render(**context)`).
"""

import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, job, compiled):
    source = job["template"]
    if source not in compiled:  # like transformers' lru_cache on compilation
        compiled[source] = env.from_string(source)
    return compiled[source].render(**job.get("context", {}))


def main():
    job = json.load(sys.stdin)
    env = make_environment()
    compiled = {}
    if isinstance(job, dict):
        try:
            sys.stdout.write(render(env, job, compiled))
        except Exception as e:  # report jinja2's error, not a traceback
            sys.stderr.write(f"{type(e).__name__}: {e}\n")
            return 1
        return 0
    results = []
    for one in job:
        try:
            results.append({"ok": True, "output": render(env, one, compiled)})
        except Exception as e:
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    sys.stdout.write(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
