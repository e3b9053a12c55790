"""ember's sandboxed chat-template rendering == transformers' apply_chat_template."""

from __future__ import annotations

import pytest

from ember.llm.chat_template import ChatTemplate, ChatTemplateError, render_chat_template

from .gguf_fixture import smollm2_hf_tokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi 👋 你好"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Say <b>\"quoted\"</b> & more"},
    ],
]

LLAMA3_LIKE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
GEMMA_LIKE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
QWEN_TOOLS_LIKE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}"
    "{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(count=0) %}"
    "{%- for message in messages %}{%- set ns.count = ns.count + 1 %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    "{{- '' if ns.count else raise_exception('empty') }}"
)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Météo <now>", "parameters": {}}}]


def _hf(template: str | None, messages, add_generation_prompt: bool, **kwargs) -> str:
    return smollm2_hf_tokenizer().apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
    )


def _ember(template: str, messages, add_generation_prompt: bool, **kwargs) -> str:
    special = smollm2_hf_tokenizer().special_tokens_map
    return ChatTemplate(template, special).render(messages, add_generation_prompt=add_generation_prompt, **kwargs)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("template_name", ["smollm2", "llama3", "qwen_tools"])
def test_matches_transformers(template_name: str, conversation: int, add_generation_prompt: bool) -> None:
    template = {
        "smollm2": smollm2_hf_tokenizer().chat_template,
        "llama3": LLAMA3_LIKE,
        "qwen_tools": QWEN_TOOLS_LIKE,
    }[template_name]
    messages = CONVERSATIONS[conversation]
    kwargs = {"tools": TOOLS} if template_name == "qwen_tools" else {}
    assert _ember(template, messages, add_generation_prompt, **kwargs) == _hf(template, messages, add_generation_prompt, **kwargs)


def test_smollm2_prompt_text() -> None:
    text = _ember(smollm2_hf_tokenizer().chat_template, CONVERSATIONS[0], True)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_gemma_like_and_raise_exception() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "ok"}]
    assert _ember(GEMMA_LIKE, messages, True) == _hf(GEMMA_LIKE, messages, True)
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        _ember(GEMMA_LIKE, CONVERSATIONS[1], True)


def test_sandbox_blocks_python_internals() -> None:
    evil = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(Exception):
        render_chat_template(evil, CONVERSATIONS[0])
    with pytest.raises(Exception):
        render_chat_template("{% set ns = namespace(_x=1) %}", CONVERSATIONS[0])


def test_strftime_and_bad_input() -> None:
    assert render_chat_template("{{ strftime_now('%Y') }}", [])[:2] in ("19", "20", "21")
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for %}")
    with pytest.raises(ChatTemplateError, match="message 0"):
        render_chat_template("x", ["not a dict"])


HOSTILE = {
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "longer than the budget of 0.5 s"),
    "endless output": ("{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}",
                       "budget"),
    "string repeat": ("{{ 'x' * 1000000000 }}", r"'str \* 1000000000' asked for 1,000,000,000"),
    "huge power": ("{{ 10 ** 100000000 }}", "too large a power"),
    "percent width": ("{{ '%0999999999d' % 1 }}", "format width"),
    "format width": ("{{ '{:>999999999}'.format(1) }}", "format width 999999999"),
    "center filter": ("{{ 'x'|center(1000000000) }}", "'center' filter asked for 1,000,000,000"),
    "batch filter": ("{{ [1]|batch(1000000000, 0)|list }}", "'batch' filter"),
    "str method": ("{{ 'x'.ljust(1000000000) }}", "str.ljust"),
    "doubling namespace": ("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}"
                           "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", "namespace attribute 's'"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_templates_stop_at_the_budget(name: str) -> None:
    from ember.llm.chat_template import RenderBudget

    source, match = HOSTILE[name]
    with pytest.raises(ChatTemplateError, match=match):
        ChatTemplate(source, budget=RenderBudget(seconds=0.5, max_chars=2**20)).render(CONVERSATIONS[0])


def test_template_type_errors_are_chat_template_errors() -> None:
    with pytest.raises(ChatTemplateError, match="TypeError"):
        render_chat_template("{{ messages[0]['content'] + 1 }}", CONVERSATIONS[0])
    with pytest.raises(ChatTemplateError, match="RecursionError"):
        render_chat_template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", CONVERSATIONS[0])


def test_budget_allows_real_templates_and_is_validated() -> None:
    import sys

    from ember.llm.chat_template import RenderBudget

    before = sys.gettrace()
    long = [{"role": "user", "content": "word " * 100000}]
    assert len(render_chat_template(GEMMA_LIKE, long)) > 500000
    assert sys.gettrace() is before  # the deadline hook is removed after each render
    with pytest.raises(ValueError, match="seconds"):
        RenderBudget(seconds=0)
    with pytest.raises(ValueError, match="max_chars"):
        RenderBudget(max_chars=0)
