"""Tiny random-initialised models, built offline and saved the way real ones are shipped.

- ``build_tiny_llama``: a Llama sharing SmolLM2's tokenizer → ``LLMConfig(model=<dir>)``.
- ``build_tiny_causal``: a Qwen2 or GPT-2 sharing it (the generic, non-Llama transformers path).

Each builder writes a folder that the production loaders open unchanged:
- ``build_tiny_open_clip``: ``open_clip_config.json`` + ``open_clip_model.safetensors`` (the
  layout of ``hf-hub:`` open_clip repos) → ``ClipConfig(model="local-dir:<dir>")``.
- ``build_tiny_vlm``: an Idefics3 (SmolVLM architecture) model + processor with SmolLM2's
  tokenizer (from the ``tokenizer_dir`` fixture in conftest) → ``VLMConfig(model=<dir>)``.
- ``build_tiny_sd``: a StableDiffusionPipeline (UNet, VAE, CLIP text encoder, CLIP BPE tokenizer
  rebuilt from open_clip's bundled vocabulary, Euler scheduler) → ``ImageGenConfig(model=<dir>)``.

Random weights: these check plumbing, shapes and control flow, never output quality.
The pytest fixtures that build them once per run are in tests/conftest.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TINY_CLIP_CFG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}

# SmolVLM's chat template (User:/Assistant: turns, <image> placeholders, <end_of_utterance>).
SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build_tiny_open_clip(out: Path, seed: int = 0) -> Path:
    """A ~1.6 M-parameter open_clip CLIP (vocab 49408 so open_clip's SimpleTokenizer fits)."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = open_clip.CLIP(**TINY_CLIP_CFG)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "open_clip_model.safetensors"))
    config = {
        "model_cfg": TINY_CLIP_CFG,
        "preprocess_cfg": {
            "mean": [0.48145466, 0.4578275, 0.40821073],
            "std": [0.26862954, 0.26130258, 0.27577711],
        },
    }
    (out / "open_clip_config.json").write_text(json.dumps(config))
    (out / "tiny-clip.json").write_text(json.dumps(TINY_CLIP_CFG))  # for open_clip.add_model_config
    return out


def build_tiny_vlm(out: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    """Idefics3: vision 32 px / patch 8 / 1 layer, Llama text 2 layers × 32; 4 image tokens per tile."""
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
    )
    from transformers.models.idefics3 import Idefics3ImageProcessor

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    specials = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
    specials += [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok.add_special_tokens({"additional_special_tokens": specials})
    image_processor = Idefics3ImageProcessor(size={"longest_edge": 64}, max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(
        image_processor=image_processor, tokenizer=tok, image_seq_len=4, chat_template=SMOLVLM_TEMPLATE
    )
    cfg = Idefics3Config(
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": len(tok),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 1024,
        },
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=2,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
    )
    torch.manual_seed(seed)
    Idefics3ForConditionalGeneration(cfg).save_pretrained(out)
    processor.save_pretrained(out)
    return out


def clip_bpe_tokenizer(model_max_length: int = 77):
    """The real CLIP BPE tokenizer (49408 tokens), rebuilt from open_clip's bundled vocabulary."""
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPTokenizer

    simple = SimpleTokenizer()
    vocab = dict(simple.encoder)
    vocab["<|startoftext|>"] = vocab.pop("<start_of_text>")
    vocab["<|endoftext|>"] = vocab.pop("<end_of_text>")
    merges = [tuple(pair) for pair, _ in sorted(simple.bpe_ranks.items(), key=lambda kv: kv[1])]
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=model_max_length)


def build_tiny_sd(out: Path, seed: int = 0) -> Path:
    """StableDiffusionPipeline: 8×8×4 latents, VAE ×2 → 16×16 RGB images."""
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = clip_bpe_tokenizer()
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(8, 16),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16,
        norm_num_groups=4,
        attention_head_dim=4,
    )
    vae = AutoencoderKL(
        block_out_channels=(8, 16),
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        norm_num_groups=4,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        sample_size=16,
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=77,
            projection_dim=16,
            bos_token_id=49406,
            eos_token_id=49407,
            pad_token_id=49407,
        )
    )
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(out)
    return out


def build_tiny_llama(
    out: Path, tokenizer_dir: Path, seed: int = 0, layers: int = 2, init: float = 0.02, noise: float = 0.0
) -> Path:
    """A random-init LlamaForCausalLM sharing SmolLM2's tokenizer, saved with save_pretrained.

    ``init`` is the weight scale (transformers' default 0.02); ``noise`` > 0 then perturbs every
    weight by that much of its own spread (a draft model close to the seed's target)."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
        initializer_range=init,
    )
    model = LlamaForCausalLM(cfg)
    if noise:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * noise * p.std())
    model.save_pretrained(out)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, out / f.name)
    return out


def build_tiny_causal(out: Path, tokenizer_dir: Path, arch: str, seed: int = 0) -> Path:
    """A random-init non-Llama causal LM (``arch``: ``qwen2`` — RoPE, GQA, q/k/v biases — or
    ``gpt2`` — learned absolute positions) sharing SmolLM2's tokenizer: the generic transformers
    path (models.hf_batch), which the Llama fast path never takes."""
    import shutil

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model: Any
    if arch == "qwen2":
        qcfg = Qwen2Config(
            vocab_size=49152,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=True,
        )
        model = Qwen2ForCausalLM(qcfg)
    elif arch == "gpt2":
        gcfg = GPT2Config(
            vocab_size=49152, n_embd=32, n_layer=2, n_head=4, n_positions=2048, bos_token_id=1, eos_token_id=2
        )
        model = GPT2LMHeadModel(gcfg)
    else:
        raise ValueError(f"unknown arch {arch!r}")
    model.save_pretrained(out)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, out / f.name)
    return out
