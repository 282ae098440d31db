"""Pieces every decoding method shares: the decoder interface, the stats record, cache and sampling helpers."""
