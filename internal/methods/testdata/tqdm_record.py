# Records tqdm output in the order CatPred's predict.py prints its bars:
# reading the input rows (no total), building and validating them (total:
# the rows), then its ensemble's models with each model's batches nested
# under the model bar (leave=False). Run with a tqdm of the venvs:
#   python tqdm_record.py 2>tqdm_catpred.stderr >tqdm_catpred.stdout
import sys
import time

from tqdm import tqdm

ROWS, MODELS, BATCH = 120, 10, 50
print("Loading data", flush=True)
for _ in tqdm(iter(range(ROWS))):
    pass
for _ in tqdm(enumerate(range(ROWS)), total=ROWS):
    pass
print("Validating SMILES", flush=True)
for _ in tqdm(list(range(ROWS))):
    pass
print(f"Test size = {ROWS:,}", flush=True)
for _ in tqdm(range(MODELS), total=MODELS):
    for _ in tqdm(range((ROWS + BATCH - 1) // BATCH), leave=False):
        time.sleep(0.05)
print("Saving predictions", flush=True)
