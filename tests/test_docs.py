"""The documentation's shape: guides stay under 500 lines, every relative link and anchor of the
guides and results pages resolves, and the results page opens with the current figures."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUIDES = [p for p in DOCS if not p.name.startswith("results")]  # results pages: tables and indexes
PAGES = DOCS + sorted((ROOT / "docs" / "results").glob("*.md"))


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text()
    out = set(re.findall(r'<a id="([^"]+)"', text))
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"^#{1,6} ", line):
            out.add(_slug(line.lstrip("#")))
    return out


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_a_guide_stays_under_500_lines(path):
    assert len(path.read_text().splitlines()) <= 500


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                bad.append(f"{page.relative_to(ROOT)}: {target} (no such anchor)")
    assert bad == []


def test_the_results_page_opens_with_the_current_figures():
    text = (ROOT / "docs" / "results.md").read_text()
    areas = re.findall(r"^## (.+)$", text, flags=re.M)
    newest = re.match(r"\d{4}-\d{2}-\d{2}", areas[0])
    assert newest is not None and "Core" in areas[1]
    for log in sorted((ROOT / "docs" / "results").glob("*.md")):
        index = text if "spark" not in log.name else (ROOT / "docs" / "results-spark.md").read_text()
        assert f"results/{log.name}" in index, log.name
