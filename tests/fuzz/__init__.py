"""Coverage-guided fuzzing of every statelens decoder (atheris); see ``tests/fuzz/run.py``."""
