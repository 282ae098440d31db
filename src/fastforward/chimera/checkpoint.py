"""A trained Chimera draft on disk: ``draft.safetensors`` (the draft's own weights, float32) plus
``chimera_config.json`` (its :class:`~fastforward.chimera.model.ChimeraConfig` and training metadata).

The target's input embeddings and LM head are shared, not copied: the draft file stays small and a draft can
only be loaded onto the target it was trained for (a vocab or hidden-size mismatch is a clear error). Kept
apart from training so that loading a draft for decoding needs no training code (Accelerate, losses).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from fastforward.chimera.model import ChimeraConfig, ChimeraDraft
from fastforward.errors import FastForwardError, read_user_text

CONFIG_FILE, WEIGHTS_FILE = "chimera_config.json", "draft.safetensors"


def target_matrices(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The target's input embeddings [V, d], LM head [V, d] and LM-head bias (or None)."""
    head = model.get_output_embeddings()
    return model.get_input_embeddings().weight, head.weight, getattr(head, "bias", None)


def save_draft(draft: ChimeraDraft, out: str | Path, meta: dict | None = None) -> Path:
    """Write the draft's weights (float32) and config, plus ``meta`` (e.g. how it was trained), into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().contiguous() for k, v in draft.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE))
    (out / CONFIG_FILE).write_text(json.dumps({"chimera": draft.cfg.to_dict(), **(meta or {})}, indent=1))
    return out


def load_draft(path: str | Path, model: torch.nn.Module) -> ChimeraDraft:
    """Load a saved draft for ``model`` (its dtype and device); fails clearly on a mismatched target."""
    p = Path(path)
    if not (p / CONFIG_FILE).exists() or not (p / WEIGHTS_FILE).exists():
        raise FastForwardError(f"no Chimera draft in '{path}' (expected {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        cfg = ChimeraConfig(**json.loads(read_user_text(p / CONFIG_FILE, "Chimera draft config"))["chimera"])
    except (ValueError, KeyError, TypeError) as e:
        raise FastForwardError(
            f"'{p / CONFIG_FILE}' is not a Chimera draft config ({type(e).__name__}: {e})"
        ) from None
    embed, head, bias = target_matrices(model)
    if (head.shape[0], head.shape[1]) != (cfg.vocab_size, cfg.hidden_size):
        raise FastForwardError(
            f"draft '{path}' was trained for vocab {cfg.vocab_size} x hidden {cfg.hidden_size}, "
            f"the target has {head.shape[0]} x {head.shape[1]}"
        )
    draft = ChimeraDraft(cfg, embed, head, bias)
    draft.load_state_dict(load_file(str(p / WEIGHTS_FILE)))
    return draft.to(device=head.device, dtype=head.dtype).eval().requires_grad_(False)
