"""Chimera (Zeng et al. 2024): a lightweight draft model on top of a frozen target, trained by self-distillation.

- :mod:`fastforward.chimera.model`: trigram encoder (+ LRU cache), full-context encoder, residual heads.
- :mod:`fastforward.chimera.tree`: the static candidate tree and path acceptance (greedy, typical).
- :mod:`fastforward.chimera.data`: self-distillation data with the target's last hidden states cached on disk.
- :mod:`fastforward.chimera.train`: training, resume, evaluation (head top-k accuracy).
- :mod:`fastforward.chimera.checkpoint`: save and load a trained draft (a small file apart from the target).

The decoder that uses a trained draft is :mod:`fastforward.decoders.chimera`; evaluating a draft by decoding
(:mod:`fastforward.bench.chimera_eval`) and the run summary (:mod:`fastforward.bench.chimera_report`) live in
``bench``, since this package never imports decoders.
"""
