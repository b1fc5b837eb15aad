"""Gemma 3 270M as a Hugging Face folder that vLLM serves: the same weights as the llama.cpp tests.

Run with the vLLM venv's Python (it needs torch, transformers, gguf and safetensors, which come
with vLLM), not the project's: ``VENV/bin/python tests/vllm_prepare_model.py GGUF OUT_DIR``.
``.ci/run`` does it once per machine; ``tests/vllm_server.py`` uses the folder.

The GGUF (Q4_K_M) is read by transformers and written out dequantised, in float32. Four
things the plain ``save_pretrained`` path gets wrong for vLLM: it refuses a GGUF-quantised
model (so the state dict is saved with safetensors and ``config.json`` is written without
``quantization_config``, naming the architecture, which a GGUF load leaves out); the tokenizer
must add ``<bos>`` as llama.cpp does (without it the outputs are noise); the tied embedding must be saved as ``model.embed_tokens.weight``
(vLLM ties ``lm_head`` to it; without it the model emits only ``<pad>``); and the GGUF has no
chat template, which ``/v1/chat/completions`` needs, so one is written (Gemma's turn markers;
a system message is sent as a user turn, as Gemma has no system role).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

#: Gemma's turns: <start_of_turn>user|model, the text, <end_of_turn>; the model's turn opened last.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = 'user' -%}{%- endif -%}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<start_of_turn>model\n{%- endif -%}"
)


def prepare(gguf: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    state = {
        name: tensor.detach().to(torch.float32).clone().contiguous()
        for name, tensor in model.state_dict().items()
    }
    if "model.embed_tokens.weight" not in state:
        state["model.embed_tokens.weight"] = state["lm_head.weight"].clone()
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, str(partial / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("torch_dtype", None)
    config["dtype"] = "float32"
    config["architectures"] = [
        type(model).__name__
    ]  # a GGUF load leaves it empty; vLLM picks the class by it
    (partial / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.add_bos_token = True  # as llama.cpp does (the GGUF says so); vLLM then adds it to completions
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/vllm_prepare_model.py MODEL.gguf OUT_DIR")
    prepare(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"wrote {sys.argv[2]}")
