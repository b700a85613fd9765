"""
Prepare OpenWebText (~8M web documents, ~9B GPT-2 tokens) for GPU-scale runs.

    pip install 'datasets==3.6.0'
    python data/openwebtext/prepare.py [--num_proc=8] [--tiktoken-file PATH] [--out_dir DIR]

Loads Skylion007/openwebtext (what the old id `openwebtext` names) with Hugging Face
`datasets` (an optional dependency, imported only here) at a pinned version: 3.6.0,
the last line (3.x) that still runs the repository's loading script, which `datasets`
4 and later refuse ("Dataset scripts are no longer supported"). On 3.x the script is
run with trust_remote_code=True; on 4 and later the load is tried as is (the Hub may
serve the repository as parquet by then) and the script error becomes a one-line
message naming the pin. Holds out a small seeded val set of documents, tokenizes every document
with GPT-2 BPE and appends <|endoftext|> (50256) after it, then streams the ids into
train.bin / val.bin (uint16, np.memmap) shard by shard. Needs tens of GB of disk.

    python data/openwebtext/prepare.py --local FILE [--tokenizer=bytes]

runs the same tokenize + write pipeline on a small local file instead, without
`datasets`: a .jsonl with a "text" field per line, or any other text file whose
documents are separated by blank lines. That is how the pipeline is tested.
--tokenizer=bytes (256 bytes + <|endoftext|> = 256) needs no tokenizer file at all.
"""

import json
import multiprocessing
import os
import re
import sys

import numpy as np
from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from data.tokenizers import (
    DataError,
    check_tokenizer,
    encoding_from_meta,
    fail,
    meta_for,
    prepare_parser,
    print_written,
    staged_outputs,
    write_meta,
)

HERE = os.path.dirname(os.path.abspath(__file__))
NUM_PROC = max(1, (os.cpu_count() or 2) // 2)  # tokenizer workers
NUM_PROC_LOAD = NUM_PROC                       # workers for datasets' own download/unpack
VAL_FRACTION = 0.0005                          # ~4k documents of 8M: plenty for a val loss
SEED = 2357
HF_REPO = 'Skylion007/openwebtext'
HF_DATASETS_PIN = '3.6.0'                      # the last datasets line that runs loading scripts
WRITE_BATCHES = 1024                           # shards written one at a time, to bound memory

# -----------------------------------------------------------------------------
# tokenize

class Tokenize:
    """Document -> {'ids': token ids + eot, 'len': n}. A plain picklable object so the
    same function works in datasets.map(num_proc=...) and in a multiprocessing.Pool;
    each worker process builds its own tiktoken encoding on first use."""
    def __init__(self, meta):
        self.meta = meta
        self.enc = None

    def __getstate__(self):
        return {'meta': self.meta, 'enc': None}

    def __call__(self, example):
        if self.enc is None:
            self.enc = encoding_from_meta(self.meta)
        # encode_ordinary: a literal '<|endoftext|>' inside a web page stays plain text
        ids = self.enc.encode_ordinary(example['text'])
        ids.append(self.meta['eot_token'])
        return {'ids': ids, 'len': len(ids)}

def write_bin(path, total, batches, n_batches, desc):
    """Stream n_batches uint16 id arrays (total ids in all) into path via np.memmap,
    so the full ~17 GB train.bin never has to fit in memory."""
    arr = np.memmap(path, dtype=np.uint16, mode='w+', shape=(total,))
    idx = 0
    for batch in tqdm(batches, total=n_batches, desc=f"writing {desc}.bin"):
        arr[idx:idx + len(batch)] = batch
        idx += len(batch)
    assert idx == total, f"wrote {idx} of {total} tokens"
    arr.flush()
    del arr

def write_outputs(meta, out_dir, splits, source):
    """splits: {'train': S, 'val': S}, S = (n_docs, n_tokens, n_batches, batches).
    Writes train.bin, val.bin and meta.pkl (with the counts) all-or-nothing."""
    with staged_outputs(out_dir, ['train.bin', 'val.bin', 'meta.pkl']) as tmp:
        for name, (n_docs, total, n_batches, batches) in splits.items():
            write_bin(tmp[f'{name}.bin'], total, batches, n_batches, name)
            meta[f'{name}_docs'], meta[f'{name}_tokens'] = n_docs, total
        meta['source'] = source
        write_meta(tmp['meta.pkl'], meta)
    return meta

# -----------------------------------------------------------------------------
# the full dataset, with Hugging Face datasets

def prepare_hf(meta, out_dir, num_proc):
    try:
        from datasets import load_dataset
    except ImportError:
        raise DataError(f"the full dataset needs Hugging Face datasets: pip install 'datasets=={HF_DATASETS_PIN}' "
                        "(or use --local FILE for a small local file)") from None
    import datasets
    script_ok = int(datasets.__version__.split('.')[0]) < 4     # 3.x runs loading scripts when trusted
    try:
        dataset = load_dataset(HF_REPO, num_proc=NUM_PROC_LOAD, **({'trust_remote_code': True} if script_ok else {}))
    except RuntimeError as e:
        if 'scripts are no longer supported' not in str(e):
            raise
        raise DataError(f"datasets {datasets.__version__} cannot run {HF_REPO}'s loading script: "
                        f"pip install 'datasets=={HF_DATASETS_PIN}'") from None
    split = dataset['train'].train_test_split(test_size=VAL_FRACTION, seed=SEED, shuffle=True)
    split['val'] = split.pop('test')
    return write_hf(split, meta, out_dir, num_proc, 'openwebtext (Hugging Face datasets)')

def write_hf(split, meta, out_dir, num_proc, source):
    """Tokenize a DatasetDict {'train', 'val'} of {'text'} rows and write it."""
    tokenized = split.map(Tokenize(meta), remove_columns=['text'], num_proc=num_proc,
                          desc="tokenizing")
    def batches(dset, n):
        # contiguous shards, concatenated: one memmap write per shard
        for i in range(n):
            shard = dset.shard(num_shards=n, index=i, contiguous=True).with_format('numpy')
            yield np.concatenate(list(shard['ids'])).astype(np.uint16)
    splits = {}
    for name, dset in tokenized.items():
        total = int(np.sum(dset.with_format('numpy')['len'], dtype=np.uint64))
        n = min(WRITE_BATCHES, len(dset))
        splits[name] = (len(dset), total, n, batches(dset, n))
    return write_outputs(meta, out_dir, splits, source)

# -----------------------------------------------------------------------------
# a small local file, same pipeline without datasets

def read_local(path):
    """List of document strings from a .jsonl ("text" field) or a blank-line separated text."""
    if not os.path.isfile(path):
        raise DataError(f"local file not found: {path}")
    try:
        with open(path, encoding='utf-8') as f:
            if path.endswith('.jsonl'):
                docs = [json.loads(line)['text'] for line in f if line.strip()]
            else:
                docs = re.split(r'\n[ \t]*\n', f.read())
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"cannot read documents from {path}: {type(e).__name__}: {e}") from None
    return [d.strip() for d in docs if d.strip()]

def prepare_local(meta, out_dir, num_proc, path):
    docs = read_local(path)
    if len(docs) < 2:
        raise DataError(f"{path} has {len(docs)} documents, need at least 2 (train and val)")
    # seeded held-out documents, at least one, like train_test_split above
    rng = np.random.default_rng(SEED)
    n_val = max(1, round(VAL_FRACTION * len(docs)))
    val_idx = set(rng.permutation(len(docs))[:n_val].tolist())
    tokenize = Tokenize(meta)
    splits = {}
    for name, want_val in (('train', False), ('val', True)):
        examples = [{'text': d} for i, d in enumerate(docs) if (i in val_idx) == want_val]
        if num_proc > 1:
            with multiprocessing.Pool(num_proc) as pool:
                out = pool.map(tokenize, examples, chunksize=64)
        else:
            out = [tokenize(e) for e in examples]
        total = sum(o['len'] for o in out)
        batches = (np.array(o['ids'], dtype=np.uint16) for o in out)
        splits[name] = (len(out), total, len(out), batches)
    return write_outputs(meta, out_dir, splits, os.path.abspath(path))

# -----------------------------------------------------------------------------

def prepare(tokenizer='gpt2', local=None, tiktoken_file=None, out_dir=None, num_proc=NUM_PROC):
    """Write train.bin, val.bin, meta.pkl into out_dir (default: this folder); return meta."""
    out_dir = out_dir or HERE
    check_tokenizer(tokenizer)
    if tokenizer == 'char':
        raise DataError("openwebtext needs a tiktoken tokenizer: gpt2 or bytes")
    meta = meta_for(tokenizer, tiktoken_file=tiktoken_file, eot=True)
    if local is None:
        meta = prepare_hf(meta, out_dir, num_proc)
    else:
        meta = prepare_local(meta, out_dir, num_proc, local)
    print(f"documents: train {meta['train_docs']:,}, val {meta['val_docs']:,}")
    print_written(meta, out_dir)
    return meta

def main(argv=None):
    p = prepare_parser(__doc__, 'gpt2')  # char has no eot token: gpt2 or bytes
    p.add_argument('--local', default=None, help="small .txt/.jsonl instead of openwebtext")
    p.add_argument('--num_proc', '--num-proc', dest='num_proc', type=int, default=NUM_PROC,
                   help="tokenizer worker processes")
    args = p.parse_args(argv)
    try:
        prepare(args.tokenizer, args.local, args.tiktoken_file, args.out_dir, args.num_proc)
    except (DataError, OSError) as e:
        fail(p.prog, str(e))
    return 0

if __name__ == '__main__':
    sys.exit(main())
