"""statelens: viewers (Qt widgets and plots only)."""
