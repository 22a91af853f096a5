"""The benchmark model suite: a registry of models built offline with random weights.

Every entry has two configurations:

- ``full``: the real architecture at the batch size / sequence length PyTorch's own benchmark harness uses
  (see docs/benchmarks.md and the research notes it cites); meant for a GPU.
- ``small``: the same family shrunk (2 layers, hidden 64, sequence 32, batch 2, images 32-64 px) so that a
  model runs in seconds on 2 CPU cores.

A model whose package (timm, torchvision, torchaudio, torch_geometric, transformers) is not installed is
reported as skipped with a note, never as a failure.

``build(spec, size, mode, device, batch_size)`` returns a :class:`Workload`: the module (fp32, dropout
disabled), the example inputs and a loss function used in training mode.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any, Callable

import torch
from torch import nn
import torch.nn.functional as F

SEED = 1337


class MissingPackage(Exception):
    """The package a model needs is not installed (the model is skipped, not failed)."""


@dataclasses.dataclass
class Workload:
    model: nn.Module
    args: tuple
    kwargs: dict
    loss_fn: Callable[[Any], torch.Tensor]
    batch_size: int
    note: str = ""


@dataclasses.dataclass
class ModelSpec:
    name: str
    family: str
    package: str  # importable module name the model needs ("torch" for builtin ones)
    # build(size, mode, device, batch_size) -> Workload; batch_size None = the config's default.
    builder: Callable[..., Workload]
    description: str = ""
    fp32_only: bool = False  # like GoogleFnet in the harness: run only in fp32
    heavy: bool = False  # > ~500M params in full size; not in the default full suite
    tol_inference: float = 1e-3
    tol_training: float = 1e-2

    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def build(self, size: str, mode: str, device: str, batch_size: int | None = None) -> Workload:
        if not self.available():
            raise MissingPackage(f"package '{self.package}' is not installed")
        torch.manual_seed(SEED)
        with torch.device(device):
            wl = self.builder(size, mode, device, batch_size)
        disable_dropout(wl.model)
        wl.model.train(mode == "training")
        return wl


REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"duplicate model {spec.name}")
    REGISTRY[spec.name] = spec
    return spec


def families() -> list[str]:
    return sorted({s.family for s in REGISTRY.values()})


def select(only: list[str] | None = None, exclude: list[str] | None = None, include_heavy: bool = False) -> list[ModelSpec]:
    """Models by name or family (``only`` entries may be model names, family names or ``family:NAME``)."""
    specs = list(REGISTRY.values())
    if only:
        chosen: list[ModelSpec] = []
        for item in only:
            item = item.strip()
            if not item:
                continue
            if item in REGISTRY:
                matches = [REGISTRY[item]]
            elif item.startswith("zoo-"):  # whole families, registered on first use (zoo.py)
                from . import zoo

                matches = zoo.expand(item)
            else:
                fam = item[:-1] if item.endswith(":") else item
                matches = [s for s in specs if s.family == fam]
                if not matches:
                    lower = {k.lower(): v for k, v in REGISTRY.items()}
                    if item.lower() in lower:
                        matches = [lower[item.lower()]]
            if not matches:
                raise KeyError(f"unknown model or family '{item}' (see `python -m ember.bench --list`)")
            for m in matches:
                if m not in chosen:
                    chosen.append(m)
        specs = chosen
    else:
        specs = [s for s in specs if include_heavy or not s.heavy]
    if exclude:
        ex = set(exclude)
        specs = [s for s in specs if s.name not in ex and s.family not in ex]
    return specs


# --------------------------------------------------------------------------------------------- helpers


def disable_dropout(model: nn.Module) -> None:
    """Dropout p=0 everywhere, so eager and compiled runs compute the same function (accuracy checks)."""
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.p = 0.0
        for attr in ("drop_prob", "drop_path_prob", "layerdrop", "layer_drop"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)


def reduce_to_scalar_loss(out: Any) -> torch.Tensor:
    """Like torch._dynamo.testing.reduce_to_scalar_loss: mean of every floating output."""
    if isinstance(out, torch.Tensor):
        return out.sum() / out.numel()
    if isinstance(out, dict):
        vals = [v for v in out.values() if v is not None]
    elif isinstance(out, (list, tuple)):
        vals = [v for v in out if v is not None]
    else:
        raise TypeError(f"don't know how to reduce {type(out)} to a loss")
    losses = [reduce_to_scalar_loss(v) for v in vals if not (isinstance(v, torch.Tensor) and not v.is_floating_point())]
    return sum(losses) / len(losses)


def hf_loss(out: Any) -> torch.Tensor:
    loss = out["loss"] if isinstance(out, dict) else out[0]
    if loss is None:
        raise RuntimeError("model returned no loss")
    return loss


def _pick(size: str, full: Any, small: Any) -> Any:
    return full if size == "full" else small


# ------------------------------------------------------------------------------------------ transformers


def _zero_dropout_config(cfg: Any) -> None:
    for k, v in list(cfg.to_dict().items()):
        lk = k.lower()
        if isinstance(v, float) and ("dropout" in lk or "drop_prob" in lk or lk.endswith("_pdrop") or "layerdrop" in lk or "layer_drop" in lk):
            try:
                setattr(cfg, k, 0.0)
            except Exception:
                pass
    for sub in ("text_config", "vision_config", "encoder", "decoder"):
        s = getattr(cfg, sub, None)
        if s is not None and hasattr(s, "to_dict") and s is not cfg:
            _zero_dropout_config(s)


SMALL_BERT = dict(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=128, max_position_embeddings=128)
SMALL_BART = dict(vocab_size=1024, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128)
SMALL_T5 = dict(vocab_size=1024, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4)
SMALL_LLAMA = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def hf(name: str, model_cls: str, config_cls: str, full_cfg: dict, small_cfg: dict, *, kind: str,
       seq: tuple[int, int], bs: tuple[int, int], low_id: int = 3, eos_last: bool = False,
       image: tuple[int, int] | None = None, **spec_kw: Any) -> ModelSpec:
    """A transformers model built from a config object.

    kind: "lm" (input_ids; labels same shape), "seqcls" (labels (B,)), "seq2seq" (input_ids,
    decoder_input_ids, labels), "image" (pixel_values, labels (B,)), "clip" (input_ids + pixel_values),
    "speech2seq" (Whisper: input_features, decoder_input_ids, labels).
    seq = (full, small) sequence length; bs = (full, small) batch size.
    """

    def builder(size: str, mode: str, device: str, batch_size: int | None) -> Workload:
        import transformers

        transformers.logging.set_verbosity_error()
        cfg_kw = dict(_pick(size, full_cfg, small_cfg))
        cfg = getattr(transformers, config_cls)(**cfg_kw)
        _zero_dropout_config(cfg)
        model = getattr(transformers, model_cls)(cfg)
        try:
            model.config.use_cache = False
        except Exception:
            pass
        B = batch_size or _pick(size, bs[0], bs[1])
        S = _pick(size, seq[0], seq[1])
        training = mode == "training"
        kwargs: dict[str, Any] = {}
        vocab = getattr(cfg, "vocab_size", None) or getattr(getattr(cfg, "text_config", None), "vocab_size", 0)
        if kind in ("lm", "seqcls", "seq2seq"):
            ids = torch.randint(low_id, vocab, (B, S), dtype=torch.int64)
            if eos_last:
                ids[:, -1] = cfg.eos_token_id
            kwargs["input_ids"] = ids
            if kind == "seq2seq":
                kwargs["decoder_input_ids"] = ids.clone()
            if training:
                if kind == "seqcls":
                    kwargs["labels"] = torch.randint(0, max(cfg.num_labels - 1, 1), (B,), dtype=torch.int64)
                else:
                    kwargs["labels"] = torch.randint(0, vocab - 1, (B, S), dtype=torch.int64)
        elif kind == "image":
            H = _pick(size, image[0], image[1])
            kwargs["pixel_values"] = torch.randn(B, 3, H, H)
            if training:
                kwargs["labels"] = torch.randint(0, cfg.num_labels, (B,), dtype=torch.int64)
        elif kind == "clip":
            H = cfg.vision_config.image_size
            kwargs["input_ids"] = torch.randint(low_id, vocab, (B, S), dtype=torch.int64)
            kwargs["pixel_values"] = torch.randn(B, 3, H, H)
            if training:
                kwargs["return_loss"] = True
        elif kind == "speech2seq":
            frames = 2 * cfg.max_source_positions
            kwargs["input_features"] = torch.randn(B, cfg.num_mel_bins, frames)
            ids = torch.randint(low_id, vocab, (B, S), dtype=torch.int64)
            kwargs["decoder_input_ids"] = ids
            if training:
                kwargs["labels"] = torch.randint(0, vocab - 1, (B, S), dtype=torch.int64)
        else:
            raise ValueError(kind)
        loss_fn = hf_loss if training else reduce_to_scalar_loss
        return Workload(model, (), kwargs, loss_fn, B)

    return register(ModelSpec(name=name, family="transformers", package="transformers", builder=builder,
                              description=f"{model_cls}({config_cls}(...))", **spec_kw))


hf("BertForMaskedLM", "BertForMaskedLM", "BertConfig", {}, SMALL_BERT, kind="lm", seq=(512, 32), bs=(16, 2))
hf("DistilBertForMaskedLM", "DistilBertForMaskedLM", "DistilBertConfig", {},
   dict(vocab_size=1024, dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=128),
   kind="lm", seq=(512, 32), bs=(128, 2))
hf("RobertaForCausalLM", "RobertaForCausalLM", "RobertaConfig",
   dict(is_decoder=True, max_position_embeddings=514, type_vocab_size=1),
   dict(SMALL_BERT, is_decoder=True, max_position_embeddings=130, type_vocab_size=1),
   kind="lm", seq=(512, 32), bs=(16, 2))
hf("AlbertForMaskedLM", "AlbertForMaskedLM", "AlbertConfig", {}, dict(SMALL_BERT, embedding_size=32),
   kind="lm", seq=(512, 32), bs=(4, 2))
hf("ElectraForCausalLM", "ElectraForCausalLM", "ElectraConfig", dict(is_decoder=True),
   dict(SMALL_BERT, is_decoder=True, embedding_size=32), kind="lm", seq=(512, 32), bs=(32, 2))
hf("GPT2ForSequenceClassification", "GPT2ForSequenceClassification", "GPT2Config", dict(pad_token_id=0),
   dict(pad_token_id=0, vocab_size=1024, n_embd=64, n_layer=2, n_head=2, n_positions=128),
   kind="seqcls", seq=(1024, 32), bs=(4, 2), tol_inference=4e-3)
hf("GPT2LMHeadModel", "GPT2LMHeadModel", "GPT2Config", {},
   dict(vocab_size=1024, n_embd=64, n_layer=2, n_head=2, n_positions=128), kind="lm", seq=(1024, 32), bs=(4, 2))
hf("DistillGPT2", "GPT2LMHeadModel", "GPT2Config", dict(n_layer=6),
   dict(vocab_size=1024, n_embd=64, n_layer=1, n_head=2, n_positions=128), kind="lm", seq=(512, 32), bs=(16, 2))
hf("T5Small", "T5ForConditionalGeneration", "T5Config", {}, SMALL_T5, kind="seq2seq", seq=(1024, 32), bs=(4, 2))
hf("BartForConditionalGeneration", "BartForConditionalGeneration", "BartConfig", {}, SMALL_BART,
   kind="seq2seq", seq=(1024, 32), bs=(4, 2), eos_last=True)
hf("BartForCausalLM", "BartForCausalLM", "BartConfig", {}, SMALL_BART, kind="lm", seq=(1024, 32), bs=(4, 2),
   eos_last=True)
hf("OPTForCausalLM", "OPTForCausalLM", "OPTConfig", {},
   dict(vocab_size=1024, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=2,
        max_position_embeddings=128, word_embed_proj_dim=64), kind="lm", seq=(2048, 32), bs=(2, 2))
hf("MobileBertForMaskedLM", "MobileBertForMaskedLM", "MobileBertConfig", {},
   dict(vocab_size=1024, hidden_size=64, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_feedforward_networks=2,
        max_position_embeddings=128), kind="lm", seq=(128, 32), bs=(128, 2))
hf("MT5ForConditionalGeneration", "MT5ForConditionalGeneration", "MT5Config", {}, SMALL_T5,
   kind="seq2seq", seq=(1024, 32), bs=(16, 2), tol_training=2e-2)
hf("AllenaiLongformerBase", "LongformerForMaskedLM", "LongformerConfig",
   dict(attention_window=512, max_position_embeddings=4098, vocab_size=50265, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, type_vocab_size=1),
   dict(SMALL_BERT, attention_window=16, max_position_embeddings=130, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, type_vocab_size=1), kind="lm", seq=(1024, 32), bs=(4, 2))
hf("ViTForImageClassification", "ViTForImageClassification", "ViTConfig", {},
   dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=32,
        patch_size=8, num_labels=10), kind="image", seq=(0, 0), bs=(128, 2), image=(224, 32))
hf("LlamaSmall", "LlamaForCausalLM", "LlamaConfig",
   dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=4), SMALL_LLAMA, kind="lm", seq=(1024, 32), bs=(8, 2))
hf("Llama-3.2-1B-shape", "LlamaForCausalLM", "LlamaConfig",
   dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True),
   dict(SMALL_LLAMA, tie_word_embeddings=True), kind="lm", seq=(1024, 32), bs=(1, 2), heavy=True)
hf("Qwen3-0.6B-shape", "Qwen3ForCausalLM", "Qwen3Config",
   dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, tie_word_embeddings=True, max_position_embeddings=40960,
        rope_theta=1000000.0),
   dict(SMALL_LLAMA, head_dim=16, tie_word_embeddings=True), kind="lm", seq=(1024, 32), bs=(1, 2), heavy=True)
hf("Phi3Small", "Phi3ForCausalLM", "Phi3Config",
   dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=16, vocab_size=32064),
   dict(SMALL_LLAMA, num_key_value_heads=4, pad_token_id=0), kind="lm", seq=(1024, 32), bs=(8, 2))
hf("CLIPModel", "CLIPModel", "CLIPConfig", {},
   dict(text_config=dict(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128, max_position_embeddings=77),
        vision_config=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                           image_size=32, patch_size=8), projection_dim=32),
   kind="clip", seq=(77, 16), bs=(32, 2))
hf("PegasusForCausalLM", "PegasusForCausalLM", "PegasusConfig", {}, SMALL_BART, kind="lm", seq=(128, 32),
   bs=(32, 2))
hf("PLBartForCausalLM", "PLBartForCausalLM", "PLBartConfig", {}, SMALL_BART, kind="lm", seq=(1024, 32), bs=(8, 2))
hf("MBartForCausalLM", "MBartForCausalLM", "MBartConfig", {}, SMALL_BART, kind="lm", seq=(1024, 32), bs=(4, 2))
hf("M2M100ForConditionalGeneration", "M2M100ForConditionalGeneration", "M2M100Config", {},
   dict(vocab_size=1024, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128),
   kind="seq2seq", seq=(128, 32), bs=(16, 2))
hf("XGLMForCausalLM", "XGLMForCausalLM", "XGLMConfig", {},
   dict(vocab_size=1024, d_model=64, num_layers=2, attention_heads=2, ffn_dim=128, max_position_embeddings=128),
   kind="lm", seq=(128, 32), bs=(8, 2), heavy=True)
hf("MegatronBertForCausalLM", "MegatronBertForCausalLM", "MegatronBertConfig", dict(is_decoder=True),
   dict(SMALL_BERT, is_decoder=True), kind="lm", seq=(512, 32), bs=(4, 2))
hf("LayoutLMForMaskedLM", "LayoutLMForMaskedLM", "LayoutLMConfig", {}, SMALL_BERT, kind="lm", seq=(512, 32),
   bs=(16, 2))
hf("TrOCRForCausalLM", "TrOCRForCausalLM", "TrOCRConfig", {},
   dict(vocab_size=1024, d_model=64, decoder_layers=2, decoder_attention_heads=2, decoder_ffn_dim=128,
        max_position_embeddings=128), kind="lm", seq=(256, 32), bs=(32, 2))
hf("GoogleFnet", "FNetForMaskedLM", "FNetConfig", {},
   dict(vocab_size=1024, hidden_size=64, num_hidden_layers=2, intermediate_size=128, max_position_embeddings=128,
        tpu_short_seq_length=32), kind="lm", seq=(512, 32), bs=(16, 2), fp32_only=True)
hf("YituTechConvBert", "ConvBertForMaskedLM", "ConvBertConfig", {}, dict(SMALL_BERT, embedding_size=64),
   kind="lm", seq=(512, 32), bs=(16, 2))
hf("DebertaV2ForMaskedLM", "DebertaV2ForMaskedLM", "DebertaV2Config", {}, SMALL_BERT, kind="lm",
   seq=(512, 32), bs=(2, 2), heavy=True)
hf("WhisperForConditionalGeneration", "WhisperForConditionalGeneration", "WhisperConfig", {},
   dict(vocab_size=1024, num_mel_bins=80, encoder_layers=2, encoder_attention_heads=2, decoder_layers=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64, max_source_positions=16,
        max_target_positions=64, decoder_start_token_id=2, pad_token_id=1, bos_token_id=1, eos_token_id=2),
   kind="speech2seq", seq=(448, 16), bs=(8, 2))


# ------------------------------------------------------------------------------------------------ timm


def timm_model(name: str, bs: int, small_kw: dict | None = None, small_px: int = 64, **spec_kw: Any) -> ModelSpec:
    arch = name

    def builder(size: str, mode: str, device: str, batch_size: int | None) -> Workload:
        import timm
        import timm.data

        training = mode == "training"
        if size == "full":
            model = timm.create_model(arch, pretrained=False, drop_rate=0.0)
            cfg = timm.data.resolve_data_config({}, model=model, use_test_size=not training)
            input_size = tuple(cfg["input_size"])
            B = batch_size or bs
        else:
            model = timm.create_model(arch, pretrained=False, num_classes=10, drop_rate=0.0, **(small_kw or {}))
            input_size = (3, small_px, small_px)
            B = batch_size or 2
        x = torch.randint(256, (B,) + input_size).float()
        x = (x - x.mean()) / x.std()
        return Workload(model, (x,), {}, reduce_to_scalar_loss, B)

    return register(ModelSpec(name=f"timm_{name.split('.')[0]}", family="timm", package="timm", builder=builder,
                              description=f"timm.create_model('{name}', pretrained=False)", **spec_kw))


_SMALL_VIT = dict(img_size=64, depth=2, embed_dim=64, num_heads=2)
timm_model("resnet50", 128)
timm_model("vit_base_patch16_224", 128, _SMALL_VIT)
timm_model("convnext_tiny", 128, dict(depths=(1, 1, 1, 1), dims=(16, 32, 64, 128)))
timm_model("efficientnet_b0", 128)
timm_model("tf_efficientnet_b0", 128)
timm_model("mobilenetv3_large_100", 512, tol_training=4e-2)
timm_model("mobilenetv2_100", 128)
timm_model("deit_base_distilled_patch16_224", 64, _SMALL_VIT, tol_training=8e-2)
timm_model("beit_base_patch16_224", 64, _SMALL_VIT, tol_training=0.16)
timm_model("regnety_040", 128)
timm_model("ghostnet_100", 512)
timm_model("inception_v3", 128, small_px=96, tol_training=4e-2)
timm_model("repvgg_a2", 128)
timm_model("visformer_small", 128, dict(img_size=64))
timm_model("mixer_b16_224", 128, dict(img_size=64))


# ----------------------------------------------------------------------------------------- torchvision


def tv_model(name: str, bs_eval: int, bs_train: int, small_px: int = 64, **spec_kw: Any) -> ModelSpec:
    def builder(size: str, mode: str, device: str, batch_size: int | None) -> Workload:
        import torchvision

        ctor = getattr(torchvision.models, name)
        training = mode == "training"
        if size == "full":
            model = ctor(weights=None)
            px = 224
            B = batch_size or (bs_train if training else bs_eval)
            classes = 1000
        else:
            model = ctor(weights=None, num_classes=10)
            px = small_px
            B = batch_size or 2
            classes = 10
        x = torch.randn(B, 3, px, px)
        target = torch.randint(0, classes, (B,))

        def loss_fn(out: torch.Tensor, _t=target) -> torch.Tensor:
            return F.cross_entropy(out, _t)

        return Workload(model, (x,), {}, loss_fn, B)

    spec_kw.setdefault("tol_inference", 1e-4)
    spec_kw.setdefault("tol_training", 1e-3)
    return register(ModelSpec(name=f"tv_{name}", family="torchvision", package="torchvision", builder=builder,
                              description=f"torchvision.models.{name}(weights=None)", **spec_kw))


tv_model("resnet50", 32, 32)
tv_model("resnet18", 8, 16)
tv_model("mobilenet_v2", 16, 96)
tv_model("mobilenet_v3_large", 32, 32)
tv_model("vgg16", 4, 64, small_px=32)
tv_model("resnext50_32x4d", 8, 8)
tv_model("shufflenet_v2_x1_0", 64, 128, tol_training=8e-2)
tv_model("squeezenet1_1", 16, 32, tol_training=8e-2)
tv_model("densenet121", 64, 4)
tv_model("alexnet", 128, 128)
tv_model("mnasnet1_0", 32, 32)


# ----------------------------------------------------------------------------------------- torchaudio


def _audio(name: str, full: Callable[[], nn.Module], small: Callable[[], nn.Module], full_shape: tuple,
           small_shape: tuple, **spec_kw: Any) -> ModelSpec:
    def builder(size: str, mode: str, device: str, batch_size: int | None) -> Workload:
        model = _pick(size, full, small)()
        shape = list(_pick(size, full_shape, small_shape))
        if batch_size:
            shape[0] = batch_size
        x = torch.randn(*shape)
        return Workload(model, (x,), {}, reduce_to_scalar_loss, shape[0])

    return register(ModelSpec(name=name, family="torchaudio", package="torchaudio", builder=builder, **spec_kw))


_W2V_NODROP = dict(encoder_projection_dropout=0.0, encoder_attention_dropout=0.0, encoder_ff_interm_dropout=0.0,
                   encoder_dropout=0.0, encoder_layer_drop=0.0)


def _w2v_small() -> nn.Module:
    import torchaudio

    return torchaudio.models.wav2vec2_model(
        extractor_mode="group_norm", extractor_conv_layer_config=[(32, 10, 5), (32, 3, 2), (32, 3, 2)],
        extractor_conv_bias=False, encoder_embed_dim=64, encoder_projection_dropout=0.0, encoder_pos_conv_kernel=16,
        encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=2, encoder_attention_dropout=0.0,
        encoder_ff_interm_features=128, encoder_ff_interm_dropout=0.0, encoder_dropout=0.0,
        encoder_layer_norm_first=False, encoder_layer_drop=0.0, aux_num_out=None)


def _tasnet_small() -> nn.Module:
    import torchaudio

    return torchaudio.models.ConvTasNet(num_sources=2, enc_kernel_size=16, enc_num_feats=64, msk_kernel_size=3,
                                        msk_num_feats=32, msk_num_hidden_feats=64, msk_num_layers=2,
                                        msk_num_stacks=1)


_audio("audio_wav2vec2_base", lambda: __import__("torchaudio").models.wav2vec2_base(**_W2V_NODROP), _w2v_small,
       (8, 64000), (2, 4000), description="torchaudio.models.wav2vec2_base()")
_audio("audio_hubert_base", lambda: __import__("torchaudio").models.hubert_base(**_W2V_NODROP), _w2v_small,
       (8, 64000), (2, 4000), description="torchaudio.models.hubert_base()")
_audio("audio_convtasnet", lambda: __import__("torchaudio").models.ConvTasNet(), _tasnet_small,
       (8, 1, 32000), (2, 1, 4000), description="torchaudio.models.ConvTasNet()")


# ------------------------------------------------------------------------------------- torch_geometric


def pyg_model(cls_name: str, **spec_kw: Any) -> ModelSpec:
    def builder(size: str, mode: str, device: str, batch_size: int | None) -> Workload:
        import torch_geometric.nn as gnn

        nodes, edges, feats, layers = _pick(size, (10000, 200000, 64, 3), (200, 1000, 16, 2))
        model = getattr(gnn, cls_name)(feats, feats, num_layers=layers)
        x = torch.randn(nodes, feats)
        edge_index = torch.randint(nodes, (2, edges))
        return Workload(model, (x, edge_index), {}, reduce_to_scalar_loss, 1)

    return register(ModelSpec(name=f"pyg_{cls_name}", family="torch_geometric", package="torch_geometric",
                              builder=builder, description=f"torch_geometric.nn.{cls_name}(C, C, num_layers=L)",
                              **spec_kw))


for _c in ("GCN", "GraphSAGE", "GIN", "EdgeCNN", "GAT"):
    pyg_model(_c)


# --------------------------------------------------------------------------------- builtin (torch only)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, layers: int, out: int):
        super().__init__()
        mods: list[nn.Module] = []
        d = dim
        for _ in range(layers):
            mods += [nn.Linear(d, hidden), nn.LayerNorm(hidden), nn.GELU()]
            d = hidden
        mods.append(nn.Linear(d, out))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class NanoGPT(nn.Module):
    """nanoGPT (Karpathy), as in TorchBench's nanogpt: GPT-2 small shape, vocab 50304, block 1024."""

    def __init__(self, vocab: int, block: int, d: int, layers: int, heads: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


class TinyResNet(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers: list[nn.Module] = []
        c = width
        for i in range(blocks):
            nc = c * 2 if i else c
            layers.append(_ResBlock(c, nc, stride=2 if i else 1))
            c = nc
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None if (cin == cout and stride == 1) else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


def _builtin(name: str, make: Callable[[str, str, int | None], Workload], description: str, **kw: Any) -> None:
    def builder(size: str, mode: str, device: str, batch_size: int | None) -> Workload:
        return make(size, mode, batch_size)

    register(ModelSpec(name=name, family="builtin", package="torch", builder=builder, description=description, **kw))


def _mlp(size: str, mode: str, bs: int | None) -> Workload:
    dim, hidden, layers, B = _pick(size, (1024, 4096, 4, 256), (32, 64, 2, 8))
    B = bs or B
    return Workload(MLP(dim, hidden, layers, 10), (torch.randn(B, dim),), {}, reduce_to_scalar_loss, B)


def _nanogpt(size: str, mode: str, bs: int | None) -> Workload:
    vocab, block, d, layers, heads, S, B = _pick(size, (50304, 1024, 768, 12, 12, 1024, 4), (1024, 64, 64, 2, 2, 32, 2))
    B = bs or B
    idx = torch.randint(0, vocab, (B, S))
    return Workload(NanoGPT(vocab, block, d, layers, heads), (idx,), {}, reduce_to_scalar_loss, B)


def _tinyresnet(size: str, mode: str, bs: int | None) -> Workload:
    width, blocks, px, B = _pick(size, (64, 4, 224, 64), (8, 2, 32, 2))
    B = bs or B
    return Workload(TinyResNet(width, blocks, 10), (torch.randn(B, 3, px, px),), {}, reduce_to_scalar_loss, B)


_builtin("mlp", _mlp, "4-layer MLP with LayerNorm/GELU (small: 2 layers, hidden 64)")
_builtin("nanogpt", _nanogpt, "nanoGPT, GPT-2 small shape (TorchBench nanogpt)")
_builtin("tiny_resnet", _tinyresnet, "a 4-stage ResNet-style CNN with BatchNorm")
