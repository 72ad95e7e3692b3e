"""statelens: readers (pure Python, never Qt): filesystem, logs, schemas, codecs, rows, state stores."""
