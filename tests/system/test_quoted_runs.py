"""A run quoted in several places is one run: the same command and the same figures wherever it appears.

The resolve guide once credited "the command above" with the README's avg F1 and clusters, measured
with ``--asl_variant static``, which its own command left out (as written it trains another model). The
figures themselves were measured by running the command (docs/guides/resolve.md, section 2); this test holds
every copy of the command and of its figures to one another.
"""

from __future__ import annotations

import json
import re
import shlex

from helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
RESOLVE = (ROOT / "docs" / "guides" / "resolve.md").read_text(encoding="utf-8")
COREF_E2E = (ROOT / "docs" / "guides" / "coref_e2e.md").read_text(encoding="utf-8")


def _flags(command: str, *dropped: str) -> dict[str, str | None]:
    """``--flag value`` pairs of a command line (``--train_file`` and ``dropped`` left out: they differ by page)."""
    words = shlex.split(command.replace("\\\n", " "))
    flags: dict[str, str | None] = {}
    for index, word in enumerate(words):
        if word.startswith("--"):
            following = words[index + 1] if index + 1 < len(words) else None
            flags[word] = None if following is None or following.startswith("--") else following
    for flag in ("--train_file", *dropped):
        flags.pop(flag, None)
    return flags


def _training_command(page: str, heading: str, output_dir: str = "out/asl") -> str:
    """The ``corefbert finetune coref-e2e ... --output_dir OUTPUT_DIR`` command of a bash block under ``heading``."""
    section = page.split(heading, 1)[1]
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        found = re.search(rf"corefbert finetune coref-e2e (?:(?!corefbert ).)*?--output_dir {output_dir}\b", block, re.S)
        if found:
            return found.group(0)
    raise AssertionError(f"no coref-e2e command writing {output_dir} under {heading!r}")


def test_the_litbank_quick_run_is_the_same_command_everywhere():
    readme = re.search(r"`(corefbert finetune coref-e2e [^`]*--output_dir out/asl)`", README).group(1)
    resolve = _training_command(RESOLVE, "## 2. Train a model on the shared LitBank documents")
    usage = _training_command(COREF_E2E, "## Usage")
    assert _flags(resolve) == _flags(readme) == _flags(usage)
    assert _flags(resolve)["--asl_variant"] == "static"  # the model the quoted figures belong to


def test_the_model_to_train_for_resolve_is_the_90_document_minilm_recipe_everywhere():
    readme = re.search(r"`(corefbert finetune coref-e2e [^`]*--output_dir out/litbank90_bert)`", README).group(1)
    resolve = _training_command(RESOLVE, "## 2. Train a model on the shared LitBank documents", "out/litbank90_bert")
    results = _training_command(COREF_E2E, "## Results on the 90 shared LitBank documents", "out/litbank90_bert")
    assert _flags(readme, "--model_name_or_path") == _flags(resolve, "--model_name_or_path") == \
        _flags(results, "--model_name_or_path")
    assert "--model out/litbank90_bert/best" in README and "--model out/litbank90_bert/best" in RESOLVE


def test_the_litbank_quick_runs_figures_agree_everywhere():
    readme_f1 = re.search(r"300 steps, avg F1 ([\d.]+)", README).group(1)
    usage_f1 = re.search(r"avg F1 ([\d.]+) on the 3\s+held out", COREF_E2E).group(1)
    row = next(line for line in RESOLVE.splitlines() if "(the smoke run of section 2)" in line and line.startswith("|"))
    resolve_f1 = [cell.strip() for cell in row.split("|")][5]
    assert readme_f1 == usage_f1 == resolve_f1

    printed = re.search(r"prints:\n\n```json\n(.*?)```", COREF_E2E, re.S).group(1)
    clusters = [[mention["text"] for mention in cluster] for cluster in json.loads(printed)]
    assert len(clusters) == 1
    assert " / ".join(clusters[0]) in RESOLVE.replace("\n", " ")
    readme_clusters = re.search(r"that model links ([^;]+);", README).group(1)  # the MiniLM model's
    assert readme_clusters in " ".join(RESOLVE.split())
