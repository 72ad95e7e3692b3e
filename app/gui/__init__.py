"""statelens desktop app: the only part of ``app`` that imports Qt."""
