"""MkDocs hooks (mkdocs.yml ``hooks:``): the site's home page is README.md and its changelog CHANGELOG.md.

Both files stay where a repository reader finds them; the site is given them as generated pages, with the
README's links into ``docs/`` made relative to the site, so nothing is copied by hand and nothing drifts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

#: Site page -> repository file it is made from.
PAGES = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}


def _site_markdown(text: str) -> str:
    """Links of a repository-root page as the site sees them (``docs/app.md`` is ``app.md`` there)."""
    text = re.sub(r"\]\(docs/", "](", text)
    return re.sub(r"\]\(CHANGELOG\.md\)", "](changelog.md)", text)


def on_files(files: Files, config: Any) -> Files:
    """Add the README as ``index.md`` and the CHANGELOG as ``changelog.md``."""
    root = Path(config.config_file_path).parent
    for page, source in PAGES.items():
        if files.get_file_from_path(page) is not None:
            raise ValueError(f"docs/{page} would hide {source}: the site makes {page} from {source}")
        text = (root / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=_site_markdown(text)))
    return files
