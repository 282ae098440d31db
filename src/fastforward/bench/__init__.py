"""Side-by-side benchmark of decoding methods, one process, same prompts, every sample counted."""
