"""
The datasets: data/<name>/{train.bin, val.bin, meta.pkl}, each folder built by its prepare.py. find_data is how
train.py finds one (and prepares the default one when it is missing).
"""
import difflib
import os
import pickle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the repository's root


def find_data(cfg, ddp):
    """(folder, meta) of the dataset; prepares the default one when it is missing."""
    from configurator import UserError, one_line  # here: the prepare scripts import data/ without torch
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
    return folder, meta
