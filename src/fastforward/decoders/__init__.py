"""Decoding methods, one module each, all behind :class:`fastforward.core.decoder.Decoder`.

The registry in :mod:`fastforward.decoders.registry` maps CLI/bench method names to constructors.
"""
