"""The side-by-side bAbI table of docs/guides/babi.md (section C): each task both readers have finished, with the
held-out counts, beside the paper's appendix C (Dhingra et al. 2018, table 4: GA w/ GRU, GA w/ C-GRU; test sets,
best of 10 seeds):

    python docs/guides/babi_paper_table.py RUNS_FOLDER

RUNS_FOLDER holds ``ga_gru/`` and ``ga_cgru/``, the ``--output_dir`` of each reader's ``finetune/run_babi.py`` run
(``babi_table.json`` and ``qaN/seed_0/all_results.json``); tasks in number order.
"""

import os
import sys

from corefbert.text.jsonio import read_json

PAPER = {1: (0.997, 1.000), 2: (0.345, 0.990), 3: (0.558, 0.982), 4: (1.000, 1.000), 5: (0.989, 0.993),
         6: (0.962, 0.976), 7: (0.946, 0.976), 8: (0.947, 0.964), 9: (0.991, 0.990), 10: (0.992, 0.986),
         11: (0.995, 0.996), 12: (1.000, 0.996), 13: (0.998, 0.993), 14: (0.895, 0.849), 15: (0.521, 0.470),
         16: (0.488, 0.999), 17: (0.580, 0.574), 18: (0.908, 0.896), 19: (0.095, 0.099), 20: (0.998, 1.000)}
READERS = ("ga_gru", "ga_cgru")

runs = sys.argv[1]
tables = {m: read_json(os.path.join(runs, m, "babi_table.json")) for m in READERS}
finished = sorted((t for t in tables["ga_gru"]["tasks"] if t in tables["ga_cgru"]["tasks"]), key=int)
print("| task | GA + GRU | GA + C-GRU | paper GA + GRU / GA + C-GRU (test, max of 10 seeds) |")
print("|---|---|---|---|")
ours = {m: [] for m in READERS}
for task in finished:
    cells = []
    for m in READERS:
        accuracy = tables[m]["tasks"][task]["accuracies"][0]  # one seed
        questions = read_json(os.path.join(runs, m, f"qa{task}", "seed_0", "all_results.json"))["eval_samples"]
        cells.append(f"{accuracy:.3f} ({round(accuracy * questions)} of {questions})")
        ours[m].append(accuracy)
    gru, cgru = PAPER[int(task)]
    print(f"| {task} | {cells[0]} | {cells[1]} | {gru:.3f} / {cgru:.3f} |")
if finished:
    paper = [sum(PAPER[int(t)][i] for t in finished) / len(finished) for i in (0, 1)]
    print(f"| average of these {len(finished)} | {sum(ours['ga_gru']) / len(finished):.3f} | "
          f"{sum(ours['ga_cgru']) / len(finished):.3f} | {paper[0]:.3f} / {paper[1]:.3f} (20 tasks: 0.810 / 0.886) |")
