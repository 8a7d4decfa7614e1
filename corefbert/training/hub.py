"""The Hub round trip: a staged repository and the upload (``--push_to_hub``); the cards are :mod:`.cards`.

At the end of a run (pretraining: ``final/``; fine-tuning: ``best/``, else ``last/``) the main process copies
the model folder to ``output_dir/hub/`` with its model card and ``all_results.json``, then uploads that folder
with ``HfApi.upload_folder``: the staged folder is exactly what is uploaded, so it can be checked (or uploaded
later: ``hf upload USER/NAME output_dir/hub``) without network. The token is never written anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from huggingface_hub import HfApi, ModelCard

from corefbert.argparser import SECRET_ARGUMENTS
from corefbert.errors import CorefBertError
from corefbert.text.durable import remove_folder, replace_file
from corefbert.text.jsonio import read_json
from corefbert.training.outputs.cards import finetuning_card, repo_name

HUB_DIR = "hub"


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (read now, so a test or a shell can change it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def check_hub_arguments(args) -> None:
    """One line before any training when ``--push_to_hub`` cannot work (offline mode, a malformed repo id) or
    Hub flags come without it (they would be ignored silently)."""
    if not args.push_to_hub:
        given = [f"--{n}" for n in ("hub_model_id", "hub_token", "hub_private_repo") if getattr(args, n)]
        if given:
            raise CorefBertError(f"{', '.join(given)} given without --push_to_hub; add --push_to_hub or drop them")
        return
    if hub_offline():
        raise CorefBertError("--push_to_hub with HF_HUB_OFFLINE=1: the upload needs the network; unset "
                             "HF_HUB_OFFLINE, or drop --push_to_hub and upload output_dir later")
    if hasattr(args, "do_train") and not args.do_train:
        raise CorefBertError("--push_to_hub uploads the model a fine-tuning run trains: add --do_train, or upload "
                             "an existing folder with `hf upload USER/NAME FOLDER`")
    repo = args.hub_model_id
    if repo is not None and (repo.count("/") > 1 or not all(repo.split("/")) or any(c.isspace() for c in repo)):
        raise CorefBertError(f"--hub_model_id {repo!r} is not a Hub repository name (user/name or name)")


def public_settings(args) -> dict:
    """``asdict(args)`` without secrets (``hub_token``): what may be written to files, trackers and cards."""
    return {k: ("<redacted>" if k in SECRET_ARGUMENTS and v else v) for k, v in asdict(args).items()}


def upload_staged(staging_dir: Path, args) -> str:
    """Create the repository if needed (``--hub_private_repo``) and upload ``staging_dir``; returns the repo
    id. A failure is one line naming the staged folder and the command that uploads it later."""
    name = repo_name(args)
    api = HfApi(token=args.hub_token)  # None: $HF_TOKEN or the stored login
    try:
        repo_id = api.create_repo(name, private=args.hub_private_repo, exist_ok=True, repo_type="model").repo_id
        api.upload_folder(repo_id=repo_id, folder_path=str(staging_dir), repo_type="model",
                          commit_message=f"corefbert: upload {Path(os.path.abspath(args.output_dir)).name}")
    except Exception as err:  # noqa: BLE001 - network, auth and quota errors all leave the run's files intact
        # The token never reaches the error line (it may end up in a shared log), even if the error quotes it.
        reason = " ".join(str(err).split())
        reason = (reason.replace(args.hub_token, "<redacted>") if args.hub_token else reason)[:200]
        raise CorefBertError(f"upload to the Hub failed ({type(err).__name__}: {reason}); the run's outputs are "
                             f"intact and the repository is staged: upload it with `hf upload {name} {staging_dir}`",
                             path=staging_dir) from None
    return repo_id


def _publish(args, model_dir: Path, card: ModelCard | None, results: dict | None) -> Path:
    """Copy ``model_dir`` to ``output_dir/hub`` (replacing an earlier staging), add the card as ``README.md``
    (or keep the folder's own when ``card`` is None) and ``all_results.json``, and upload that folder."""
    staged = Path(args.output_dir) / HUB_DIR
    remove_folder(staged)
    shutil.copytree(model_dir, staged, symlinks=False)
    if card is not None:
        card.save(staged / "README.md")
    if results is not None:
        replace_file(staged / "all_results.json", json.dumps(results, indent=2) + "\n", "the results")
    repo_id = upload_staged(staged, args)
    print(f"pushed {model_dir.name}/ with its model card to https://huggingface.co/{repo_id}")
    return staged


def push_finetuned(task, args, results: dict, accelerator=None) -> Path | None:
    """``--push_to_hub`` at the end of a fine-tuning run (main process only): publish ``best/`` (else
    ``last/``) with its card and ``all_results.json``. Returns the staged folder, or None when not asked."""
    main_process = accelerator is None or accelerator.is_main_process
    if not (args.push_to_hub and main_process):
        return None
    out = Path(args.output_dir)
    candidates = ([out / "best"] if args.load_best_model_at_end else []) + [out / "last"]
    model_dir = next((d for d in candidates if (d / "config.json").is_file() or any(d.glob("*.safetensors"))), None)
    if model_dir is None:
        raise CorefBertError("--push_to_hub: no trained model to upload (neither best/ nor last/ holds one)", path=out)
    return _publish(args, model_dir, finetuning_card(task, args, results, model_dir), results)


def push_pretrained(args, final_dir: Path | None, accelerator=None) -> Path | None:
    """``--push_to_hub`` at the end of pretraining (main process only): publish ``final/`` with its card."""
    main_process = accelerator is None or accelerator.is_main_process
    if not (args.push_to_hub and main_process):
        return None
    if final_dir is None or not Path(final_dir).is_dir():
        raise CorefBertError("--push_to_hub: the run has no final/ to upload", path=args.output_dir)
    results_path = Path(args.output_dir) / "all_results.json"
    results = read_json(str(results_path)) if results_path.is_file() else None
    return _publish(args, Path(final_dir), None, results)
