"""statelens: app (entry points, command line, analysis, wiring)."""
