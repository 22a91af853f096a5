"""Model builders for scripts/zoo_sweep.py: every model of a family, tiny, offline, random weights.

Families: "transformers" (causal LM, masked LM, conditional generation and image classification
classes, from the auto mappings and a scan of the package's names), "timm" (every
timm.list_models() name, pretrained=False, 10 classes, input 1 x 3 x H x W at the model's
default size, or --image-cap where the model takes a smaller one) and "torchvision" (every
classification model of torchvision.models, weights=None, 1 x 3 x 224 x 224, 299 for
inception_v3; segmentation, detection, video and optical flow models are left out). timm and
torchvision are imported lazily: a family that does not import here is reported and left out.
On the CPU machine (torch 2.13.0, where torchvision's wheel needs 2.14.1) timm imports through
scripts/zoo_timm_cpu/sitecustomize.py, which says how.

A transformers class is built from its config class's defaults shrunk by generic rules on
attribute names, applied to sub-configs too (shrink_config: hidden 64, 4 heads, 2 layers, ffn
64, vocab 512 with special token ids moved below it, 128 positions, 32 x 32 images, 4 experts;
per-layer lists cut to 2 layers keeping one of each layer type; attention stays multi-head,
grouped or multi-query as in the defaults). Where that config does not build or run, milder
levels follow (LEVELS: head dims 64 and 128 for code that assumes them, then layer counts
only), and a config over MAX_PARAMS parameters (on the meta device) is not built. A few classes
whose configs cannot be made tiny generically have an entry in TRANSFORMERS_OVERRIDES, which
says why. Attention is transformers' default (sdpa where the class supports it, else eager;
recorded per model). Inputs: input_ids (2, 16) and an all-ones attention_mask, decoder_input_ids
for encoder-decoders, pixel_values for image models; a class whose forward needs anything else
(audio features, ...) raises Skip. Each build ends with a trial eager call.


    from zoo_models import list_models, build
    names = list_models("transformers")
    wl = build("transformers", "LlamaForCausalLM", device="cpu", dtype=torch.float32)
    wl.model(*wl.args, **wl.kwargs)

`build` raises Skip(reason) for a model whose inputs this sweep does not make (audio, time
series, ...); any other exception means the model did not construct.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import torch

FAMILIES = ("transformers", "timm", "torchvision")
BATCH, SEQ = 2, 16      # transformers inputs: (BATCH, SEQ) token ids
VOCAB = 512             # vocab sizes above this are shrunk to it; special token ids kept below it
HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 64, 4, 2, 64, 2
IMAGE, PATCH = 32, 4    # transformers vision: image and patch size
CNN_IMAGE = 64          # transformers vision models without an image_size in their config
MAX_PARAMS = 150_000_000  # a shrunk config over this is not built (a rule missed a width)

TRANSFORMERS_SUFFIXES = ("ForCausalLM", "ForMaskedLM", "ForConditionalGeneration",
                         "ForImageClassification")
TRANSFORMERS_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                         "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                         "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                         "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")


class Skip(Exception):
    """A model this sweep leaves out (the reason says why); not a construction failure."""


@dataclasses.dataclass
class Workload:
    model: torch.nn.Module
    args: tuple
    kwargs: dict
    info: dict  # what was chosen: shrink level, attention implementation, input shapes


def family_available(family: str) -> str | None:
    """None when the family's package imports here, else why not."""
    try:
        __import__(family)
    except Exception as e:  # ImportError, or a package built against another torch
        return f"family {family}: not importable here ({type(e).__name__}: {str(e)[:120]})"
    return None


def list_models(family: str) -> list[str]:
    if family == "transformers":
        import transformers
        from transformers.models.auto import modeling_auto
        names = {n for n in dir(transformers) if n.endswith(TRANSFORMERS_SUFFIXES)}
        for mapping in TRANSFORMERS_MAPPINGS:
            for v in getattr(modeling_auto, mapping, {}).values():
                names.update(v if isinstance(v, (tuple, list)) else [v])
        exported = set(dir(transformers))
        return sorted(n for n in names if n in exported and not n.startswith("Auto"))
    if family == "timm":
        import timm
        return sorted(timm.list_models())
    if family == "torchvision":
        import torchvision
        return sorted(torchvision.models.list_models(module=torchvision.models))
    raise ValueError(f"unknown family {family!r}")


def build(family: str, name: str, device: str, dtype: torch.dtype,
          image_cap: int = 224) -> Workload:
    torch.manual_seed(0)
    if family == "transformers":
        wl = _build_transformers(name, device, dtype)
    elif family == "timm":
        wl = _build_timm(name, device, dtype, image_cap)
    elif family == "torchvision":
        wl = _build_torchvision(name, device, dtype)
    else:
        raise ValueError(f"unknown family {family!r}")
    return wl


# ---- transformers: generic tiny configs ----------------------------------------------------

def _cap(n: float) -> Callable[[Any], Any]:
    def f(v: Any) -> Any:
        if isinstance(v, (list, tuple)):  # per-layer sizes (Gemma-3n's intermediate_size)
            return type(v)(f(x) for x in v)
        return min(v, n) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return f


def _heads_list(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return type(v)(min(h, 2 ** i) for i, h in enumerate(v))
    return _cap(HEADS)(v)


def _width_list(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return type(v)(16 * 2 ** i for i in range(len(v)))
    return _cap(HIDDEN)(v)


def _depths(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return type(v)(min(d, 1) for d in v)
    return _cap(LAYERS)(v)


def _image(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return type(v)(min(x, IMAGE) for x in v)
    return _cap(IMAGE)(v)


# Size rules by attribute name, applied to the config and its sub-configs. "layers" rules are
# applied at every shrink level; "width" rules only at the tiny level.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
              "decoder_layers", "num_encoder_layers", "num_decoder_layers")
LAYER_RULES: dict[str, Callable[[Any], Any]] = {
    **{k: _cap(LAYERS) for k in LAYER_KEYS},
    "depths": _depths, "depth": _cap(LAYERS),
    **{k: _cap(4) for k in ("num_experts", "num_local_experts", "n_routed_experts",
                            "moe_num_experts")},
    **{k: _cap(2) for k in ("num_experts_per_tok", "num_selected_experts", "moe_topk", "moe_k",
                            "n_shared_experts")},
    **{k: _cap(1) for k in ("n_group", "topk_group", "first_k_dense_replace")},
    **{k: _cap(VOCAB) for k in ("vocab_size", "n_words")},
    **{k: _cap(128) for k in ("max_position_embeddings", "n_positions", "n_ctx")},
    "num_kv_shared_layers": _cap(0),  # Gemma-3n: layers that reuse an earlier layer's cache
    "image_size": _image,
}
def width_rules(hidden: int, heads: int, kv_heads: int, ffn: int) -> dict[str, Callable]:
    """The width rules of a tiny level: hidden size, heads (head dim hidden // heads), ffn."""
    head_dim = hidden // heads
    return {
        **{k: _cap(hidden) for k in ("hidden_size", "d_model", "n_embd", "n_embed", "d_embed",
                                     "embed_dim", "emb_dim", "embedding_size",
                                     "word_embed_proj_dim", "hidden_dim", "dim",
                                     "out_hidden_size")},

        "hidden_sizes": _width_list, "embed_dims": _width_list,
        **{k: (_heads_list if heads == HEADS else _cap(heads))
           for k in ("num_attention_heads", "n_head", "n_heads", "num_heads",
                     "encoder_attention_heads", "decoder_attention_heads", "index_n_heads",
                     "mamba_n_heads")},
        "num_key_value_heads": _cap(kv_heads),
        **{k: _cap(head_dim) for k in ("head_dim", "v_head_dim", "attention_head_size",
                                       "index_head_dim", "mamba_d_head")},
        **{k: _cap(head_dim // 2) for k in ("qk_rope_head_dim", "qk_nope_head_dim",
                                            "rotary_dim")},
        **{k: _cap(32) for k in ("kv_lora_rank", "q_lora_rank")},
        **{k: _cap(ffn) for k in ("intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim",
                                  "decoder_ffn_dim", "d_inner", "n_inner",
                                  "moe_intermediate_size", "shared_expert_intermediate_size",
                                  "ffn_hidden_size")},
        # Mamba-2 blocks: heads * head dim must equal expand * hidden
        **{k: _cap(1) for k in ("expand", "mamba_expand", "n_groups", "mamba_n_groups")},
        **{k: _cap(1.0) for k in ("width_coefficient", "depth_coefficient")},  # EfficientNet
        "patch_size": _cap(PATCH),
    }


# Shrink levels, tried in order: "tiny" (head dim 16), "tiny64" and "tiny128" (head dims 64 and 128,
# for code that assumes them: GLM-4V's and Qwen2-VL's default multimodal rope sections), "layers"
# (no width rule: configs whose widths are tied in ways the rules miss).
LEVELS: dict[str, dict[str, Callable]] = {
    "tiny": width_rules(HIDDEN, HEADS, KV_HEADS, FFN),
    "tiny64": width_rules(128, 2, 1, 128),
    "tiny128": width_rules(256, 2, 1, 256),

    "layers": {},
}
# Values that are None in a default config that does not run as it is (ESM's vocab, DeepSeek-V2's
# top-k, HunYuan's head_dim, Nemotron's key-value heads); the width ones at the tiny level only.
NONE_FILL = {"vocab_size": VOCAB, "num_experts_per_tok": 2}
NONE_FILL_WIDTH = ("head_dim", "num_key_value_heads", "moe_intermediate_size")


def _is_config(v: Any) -> bool:
    from transformers import PreTrainedConfig
    return isinstance(v, PreTrainedConfig)


def _token_id(v: Any, taken: list[int]) -> Any:
    """A special token id kept below VOCAB (ids at or above it move to the top of the vocab)."""
    if isinstance(v, (list, tuple)):
        return type(v)(_token_id(x, taken) for x in v)
    if isinstance(v, int) and not isinstance(v, bool) and v >= VOCAB:
        taken.append(v)
        return VOCAB - len(taken)
    return v


def _rope(v: Any, head_dim: int | None) -> Any:
    """rope_parameters with its multimodal sections (Qwen2-VL's mrope_section, summing to half
    the head dim) scaled to the new head dim."""
    if not isinstance(v, dict) or not head_dim or not isinstance(v.get("mrope_section"), list):
        return v
    sec, half = v["mrope_section"], head_dim // 2
    new = [max(1, round(x * half / sum(sec))) for x in sec]
    new[0] += half - sum(new)
    return dict(v, mrope_section=new)


def _get(cfg: Any, p: str) -> Any:
    try:
        return getattr(cfg, p)
    except Exception:  # AttributeError, or a per-layer attribute read globally (Gemma 4)
        return None


def shrink_config(cfg: Any, level: str) -> Any:
    """A new config of cfg's class with the size rules applied (recursively to sub-configs).
    Only parameters of the class's __init__ are passed; those whose default is None are left
    to the class to derive (head_dim from hidden_size, layer_types from the layer count) unless
    a rule names them. Lists as long as the layer count are cut to the new count."""
    rules = dict(LAYER_RULES, **LEVELS[level])
    fill = dict(NONE_FILL, **{k: rules[k](10 ** 9) for k in NONE_FILL_WIDTH if k in rules})
    cls = type(cfg)
    params = inspect.signature(cls.__init__).parameters
    old_layers = next((_get(cfg, k) for k in LAYER_KEYS if isinstance(_get(cfg, k), int)), None)
    new_layers = min(old_layers, LAYERS) if old_layers else None
    kw: dict[str, Any] = {}
    taken: list[int] = []
    for p, param in params.items():
        if p in ("self", "kwargs") or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        v = _get(cfg, p)
        if v is None:
            if p in fill and p in params:
                kw[p] = fill[p]
            continue
        if _is_config(v):
            kw[p] = shrink_config(v, level)
        elif p in rules:
            kw[p] = rules[p](v)
        elif "vocab" in p and isinstance(v, int) and not isinstance(v, bool):
            kw[p] = min(v, VOCAB)  # hash and codebook vocabularies (BLT's 500002 rows)
        elif p.endswith(("_token_id", "_token_ids", "_token_index")):
            kw[p] = _token_id(v, taken)
        elif isinstance(v, dict) and "mrope_section" in v and level != "layers":
            kw[p] = v  # scaled below, once the head dim is known
        elif (param.default is not None and param.default is not inspect.Parameter.empty) or (
                isinstance(v, (list, tuple)) and old_layers and len(v) == old_layers):
            kw[p] = v
        if (p in kw and isinstance(kw[p], (list, tuple)) and old_layers
                and len(kw[p]) == old_layers and old_layers != new_layers):
            kw[p] = type(kw[p])(_per_layer(list(kw[p]), new_layers))  # layer_types, ...
    if (isinstance(kw.get("depths"), (list, tuple)) and isinstance(kw.get("window_size"), int)
            and isinstance(kw.get("image_size"), int)):
        # windowed hierarchical vision (Swin): the last stage must still hold one window
        kw["window_size"] = min(kw["window_size"], 4)
        need = kw.get("patch_size", PATCH) * kw["window_size"] * 2 ** (len(kw["depths"]) - 1)
        kw["image_size"] = max(kw["image_size"], need)
    heads, kv = _get(cfg, "num_attention_heads"), _get(cfg, "num_key_value_heads")
    if "num_key_value_heads" in kw and isinstance(kw.get("num_attention_heads"), int) and (
            kv is None or kv == heads):
        # keep attention's kind: multi-head stays multi-head (DeepSeek's latent attention
        # expands its keys to every head and must not be repeated as grouped-query attention)
        kw["num_key_value_heads"] = kw["num_attention_heads"]
    for p in ("rope_parameters", "rope_scaling"):
        if p in kw:

            hidden, heads = kw.get("hidden_size"), kw.get("num_attention_heads")
            kw[p] = _rope(kw[p], kw.get("head_dim") or (hidden // heads if isinstance(hidden, int)
                                                        and isinstance(heads, int) else None))
    try:
        new = cls(**kw)
    except TypeError:  # a parent that wants its sub-configs as dicts (Qwen3-Omni's talker)
        new = cls(**{k: v.to_dict() if _is_config(v) else v for k, v in kw.items()})
    for k, v in vars(cfg).items():  # what a parent config set on its sub-config (DBRX's rope_theta)
        if k not in params and not k.startswith("_") and _get(new, k) is None and v is not None:
            try:
                setattr(new, k, v)
            except Exception:
                pass
    return new


def _per_layer(v: list, n: int) -> list:
    """The first n entries of a per-layer list, but one of each kind while there is room (layer
    types [sliding, sliding, sliding, full, ...] become [sliding, full]: both paths run)."""
    kinds = list(dict.fromkeys(v if all(isinstance(x, (str, int, float, bool, type(None)))
                                       for x in v) else []))
    if len(kinds) <= 1 or len(kinds) > n:
        return v[:n]
    return kinds + v[:n - len(kinds)]


# Classes that cannot be made tiny generically: (why, how).
TRANSFORMERS_OVERRIDES: dict[str, tuple[str, Callable[[str], Any]]] = {}


def _override_encoder_decoder(level: str) -> Any:
    from transformers import BertConfig, EncoderDecoderConfig
    enc = shrink_config(BertConfig(), level)
    dec = shrink_config(BertConfig(is_decoder=True, add_cross_attention=True), level)
    return EncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)


def _override_vision_encoder_decoder(level: str) -> Any:
    from transformers import GPT2Config, ViTConfig, VisionEncoderDecoderConfig
    enc = shrink_config(ViTConfig(), level)
    dec = shrink_config(GPT2Config(add_cross_attention=True), level)
    return VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)


def _override_gpt_neo(level: str) -> Any:
    from transformers import GPTNeoConfig
    return GPTNeoConfig(attention_types=[[["global", "local"], 1]], num_layers=LAYERS,
                        hidden_size=HIDDEN, num_heads=HEADS, intermediate_size=FFN,
                        vocab_size=VOCAB, max_position_embeddings=128, bos_token_id=VOCAB - 1,
                        eos_token_id=VOCAB - 1)


TRANSFORMERS_OVERRIDES = {
    "GPTNeoForCausalLM": ("attention_types spells the layer count out as (pattern, repeats) "
                          "and must match num_layers", _override_gpt_neo),

    "EncoderDecoderModel": ("its config has no defaults: it needs an encoder and a decoder "
                            "config (BERT + BERT decoder here)", _override_encoder_decoder),
    "VisionEncoderDecoderModel": ("its config has no defaults: it needs an encoder and a "
                                  "decoder config (ViT + GPT-2 here)",
                                  _override_vision_encoder_decoder),
}


def _find(cfg: Any, key: str) -> Any:
    """cfg.key, else the first sub-config's (vision_config, encoder, ...)."""
    if getattr(cfg, key, None) is not None:
        return getattr(cfg, key)
    for v in vars(cfg).values():
        if _is_config(v) and _find(v, key) is not None:
            return _find(v, key)
    return None


def _transformers_inputs(cls: type, model: torch.nn.Module, cfg: Any, device: str,
                         dtype: torch.dtype, both: bool) -> dict:
    """The main input (token ids, or images), decoder ids for encoder-decoders, and with `both`
    the other of the two too (image captioning takes images and text)."""
    params = inspect.signature(model.forward).parameters
    main = getattr(cls, "main_input_name", "input_ids")
    try:
        emb = model.get_input_embeddings()
    except Exception:  # not every class has one (NotImplementedError)
        emb = None
    vocab = getattr(emb, "num_embeddings", None) or _find(cfg, "vocab_size") or VOCAB
    hi = max(vocab - 32, 8) if vocab > 64 else vocab
    lo = 3 if hi > 3 else 0
    g = torch.Generator().manual_seed(0)
    kw: dict[str, Any] = {}
    if main == "input_ids" or (both and "input_ids" in params):
        kw["input_ids"] = torch.randint(lo, hi, (BATCH, SEQ), generator=g)
        if "attention_mask" in params:
            kw["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    if main == "pixel_values" or (both and "pixel_values" in params):
        size = _find(cfg, "image_size") or CNN_IMAGE
        h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
        ch = _find(cfg, "num_channels") or 3
        kw["pixel_values"] = torch.randn(BATCH, ch, h, w, generator=g).to(dtype)
    if not kw:
        raise Skip(f"needs inputs this sweep does not make (main input {main})")
    if getattr(cfg, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        kw["decoder_input_ids"] = torch.randint(lo, hi, (BATCH, SEQ), generator=g)
    missing = [p for p, v in params.items() if v.default is inspect.Parameter.empty
               and v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL) and p not in kw]
    if missing:
        raise Skip(f"needs inputs this sweep does not make (forward requires {', '.join(missing)})")
    return {k: v.to(device) for k, v in kw.items()}


def _n_params(cls: type, cfg: Any) -> int | None:
    """The model's parameter count, built on the meta device (None where that fails)."""
    try:
        with torch.device("meta"):
            return sum(p.numel() for p in cls(cfg).parameters())
    except Exception:
        return None


def _build_transformers(name: str, device: str, dtype: torch.dtype) -> Workload:
    """Shrink levels (LEVELS), mildest last; each with the main input alone, then with token ids
    and images both. The first that builds under MAX_PARAMS and runs eagerly is kept."""

    import transformers
    cls = getattr(transformers, name)
    main = getattr(cls, "main_input_name", "input_ids")
    if main not in ("input_ids", "pixel_values"):
        raise Skip(f"needs inputs this sweep does not make (main input {main})")
    errors = []
    for level in LEVELS:
        try:
            if name in TRANSFORMERS_OVERRIDES:
                cfg = TRANSFORMERS_OVERRIDES[name][1](level)
            else:
                cfg = shrink_config(cls.config_class(), level)
            n = _n_params(cls, cfg)
            if n is not None and n > MAX_PARAMS:
                raise ValueError(f"{n / 1e6:.0f}M parameters (over {MAX_PARAMS / 1e6:.0f}M)")
            model = cls(cfg).to(device=device, dtype=dtype).eval()
        except Exception as e:
            errors.append(f"{level}: {type(e).__name__}: {str(e)[:300]}")
            continue
        for both in (False, True):
            try:
                kwargs = _transformers_inputs(cls, model, cfg, device, dtype, both)
                with torch.no_grad():
                    model(**kwargs)  # a trial call: a config that does not run goes milder

            except Skip:
                if both:
                    raise
                continue
            except Exception as e:
                errors.append(f"{level}{' (ids and images)' if both else ''}: "
                              f"{type(e).__name__}: {str(e)[:300]}")
                continue
            info = {"shrink": level, "attn": getattr(model.config, "_attn_implementation", None),
                    "params": sum(p.numel() for p in model.parameters()),
                    "inputs": {k: list(v.shape) for k, v in kwargs.items()}}
            if errors:
                info["first_error"] = errors[0]
            return Workload(model, (), kwargs, info)
    raise RuntimeError(" | ".join(errors))


# ---- timm and torchvision -------------------------------------------------------------------

def _build_timm(name: str, device: str, dtype: torch.dtype, cap: int) -> Workload:
    import timm
    import timm.data
    model = timm.create_model(name, pretrained=False, num_classes=10)
    size = tuple(timm.data.resolve_data_config({}, model=model)["input_size"])
    info: dict[str, Any] = {"default_input": list(size)}
    if max(size[1:]) > cap:  # a smaller input where the model takes one (trial calls on the CPU)
        with torch.no_grad():
            try:  # vision transformers take their image size at construction
                small = timm.create_model(name, pretrained=False, num_classes=10, img_size=cap)
                small.eval()(torch.randn(1, size[0], cap, cap))
                model, size = small, (size[0], cap, cap)
            except Exception:
                try:  # convolutional networks take any size
                    model.eval()(torch.randn(1, size[0], cap, cap))
                    size = (size[0], cap, cap)
                except Exception:
                    pass

    model = model.to(device=device, dtype=dtype).eval()
    x = torch.randn(1, *size).to(device=device, dtype=dtype)
    info.update(input=list(x.shape), params=sum(p.numel() for p in model.parameters()))
    return Workload(model, (x,), {}, info)


def _build_torchvision(name: str, device: str, dtype: torch.dtype) -> Workload:
    import torchvision
    kw: dict[str, Any] = {"weights": None}
    if name in ("inception_v3", "googlenet"):
        kw["aux_logits"] = False
        kw["init_weights"] = True
    model = torchvision.models.get_model(name, **kw).to(device=device, dtype=dtype).eval()
    size = 299 if name == "inception_v3" else 224
    x = torch.randn(1, 3, size, size).to(device=device, dtype=dtype)
    return Workload(model, (x,), {}, {"input": list(x.shape),
                                       "params": sum(p.numel() for p in model.parameters())})
