"""
A prepared dataset, data/<name>/{train.bin, val.bin, meta.pkl} (each folder built by its prepare.py): how train.py
finds one (find_data; the default one is prepared when missing), reads its windows, and the fixed validation windows.
"""
import difflib
import os
import pickle

import numpy as np
import torch

from configurator import UserError, one_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the repository's root


def find_data(cfg, ddp):
    """(folder, meta, train tokens, val tokens) of the dataset; prepares the default one when it is missing."""
    folder = cfg.data_dir or os.path.join(ROOT, 'data', cfg.dataset)
    missing = [f for f in ('train.bin', 'val.bin', 'meta.pkl') if not os.path.isfile(os.path.join(folder, f))]
    if missing and not cfg.data_dir and cfg.dataset == 'shakespeare' and not ddp:
        print(f"{folder} is not prepared yet: preparing char-level Shakespeare now (once) ...")
        from data.shakespeare.prepare import prepare
        from data.tokenizers import DataError
        try:
            prepare('char')
        except (DataError, OSError) as e:
            raise UserError(f"could not prepare the default dataset: {one_line(e)}") from None
        missing = []
    if missing and not cfg.data_dir and not os.path.isdir(folder):
        known = [d for d in os.listdir(os.path.join(ROOT, 'data')) if not d.startswith(('_', '.'))
                 and os.path.isdir(os.path.join(ROOT, 'data', d))]
        best = difflib.get_close_matches(cfg.dataset, sorted(known), n=1)
        if best:
            raise UserError(f"no dataset {cfg.dataset!r} (no folder data/{cfg.dataset}/); did you "
                            f"mean --dataset={best[0]}?")
    if missing:
        script = os.path.join('data', cfg.dataset, 'prepare.py')
        how = (f"python data/shakespeare/prepare.py --input=FILE --out_dir={cfg.data_dir}"
               if cfg.data_dir else f"python {script}" if os.path.isfile(os.path.join(ROOT, script))
               else f"write train.bin, val.bin (uint16 tokens), meta.pkl into data/{cfg.dataset}/")
        raise UserError(f"dataset not ready: {folder} has no {', '.join(missing)}; prepare it with: {how}")
    path = os.path.join(folder, 'meta.pkl')
    try:
        with open(path, 'rb') as f:
            meta = pickle.load(f)
        meta['vocab_size']
    except Exception as e:
        raise UserError(f"cannot read {path}: {type(e).__name__}: {one_line(e)}") from None
    n_train, n_val = len(open_split(folder, 'train')), len(open_split(folder, 'val'))
    for split, n in (('validation', n_val), ('training', n_train)):
        if n < cfg.block_size + 1:
            raise UserError(f"block_size={cfg.block_size} is larger than the {split} split ({n} tokens in {folder}): "
                            f"lower --block_size")
    return folder, meta, n_train, n_val


def open_split(folder, split):
    # a fresh memmap per use, as nanoGPT does: a long-lived one keeps pages resident and grows memory
    return np.memmap(os.path.join(folder, f'{split}.bin'), dtype=np.uint16, mode='r')


def read_windows(data, starts, T, device):
    """x, y (len(starts), T) int64: windows of T+1 tokens, y shifted by one."""
    w = torch.from_numpy(np.stack([data[i:i + T + 1].astype(np.int64) for i in starts]))
    x, y = w[:, :-1], w[:, 1:]
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def eval_starts(n_tokens, T, tokens, batch_size=1):
    """The fixed validation set: evenly spaced windows of T+1 tokens over the split, from its start to its end.
    tokens=0: the whole split (as many non-overlapping windows as fit). The same for every run and every eval, so
    two runs' losses differ only by the models, not by which batches an evaluation happened to draw. The count is
    rounded down to whole batches of batch_size (the remainder dropped; one smaller batch when fewer windows than
    that fit): a smaller last batch would recompile a compiled model, under DDP while the other ranks wait."""
    last = n_tokens - T - 1                       # the last valid start
    count = last // T + 1
    if tokens:
        count = max(1, min(count, tokens // T))
    if count >= batch_size:
        count -= count % batch_size
    if count == 1:
        return [0]
    return [round(i * last / (count - 1)) for i in range(count)]
