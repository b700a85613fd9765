"""
Prepare pycode: Python source code from pinned PyPI source distributions, byte-level.

    python data/pycode/prepare.py [--out_dir DIR] [--cache_dir DIR]
    python train.py --dataset=pycode ...

Source: every *.py file of PyPI's sympy==1.14.0 sdist (about 1,500 files, 26.3M bytes;
BSD-3-Clause, with a few parts under the other permissive licenses its LICENSE file lists).
pip downloads the sdist once into cache/ next to this script, and the archive is checked
against the sha256 pinned below before anything is read from it: a different or damaged
file stops the script with one line. One package is enough: its ~25M training bytes are
more than the longest budget the sweeps train on (16M tokens), so no run repeats data.

Each .py file is a document, in path order, followed by one end-of-document token.
Empty files (many __init__.py) are skipped. The split is by file: a file is held out for
val when the crc32 of its path in the archive is 0 mod VAL_EVERY (about 5% of the files),
so a file's side depends on its path alone, not on the archive's order or its other files.

Tokens are the file's raw bytes (ids 0-255) plus <|endoftext|> = 256: vocab 257, the
`bytes` tokenizer of data/tokenizers.py with an end-of-text token, so sample.py decodes it.
Writes train.bin and val.bin (uint16) and meta.pkl (tokenizer, counts, the val files and
the pinned sources) into out_dir, which defaults to this script's folder.
"""

import os
import sys
import tarfile
import zlib

import numpy as np
from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from data.tokenizers import (
    ArgumentParser,
    DataError,
    check_sha256,
    fail,
    meta_for,
    pip_sdist,
    print_written,
    write_dataset,
)

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE_DIR = os.path.join(HERE, 'cache')
# (pip requirement, sdist file name, its sha256): computed once from the downloaded file
PACKAGES = (
    ('sympy==1.14.0', 'sympy-1.14.0.tar.gz',
     'd3d3fe8df1e5a0b42f0e7bdf50541697dbe7d23746e894990c030e2b05e72517'),
)
LICENSE = 'BSD-3-Clause (sympy; parts MIT/BSD as its LICENSE file lists)'
SUFFIX = '.py'
VAL_EVERY = 20               # crc32(path) % 20 == 0 -> val: about 5% of the files

# -----------------------------------------------------------------------------
# the source files

def fetch(packages, cache_dir):
    """The verified archive path of each (requirement, file name, sha256)."""
    paths = []
    for package, filename, sha256 in packages:
        path = pip_sdist(package, filename, cache_dir)
        check_sha256(path, sha256)
        paths.append(path)
    return paths

def read_files(tarball):
    """{path in the archive: bytes} of every non-empty *.py file, and how many were empty."""
    files, empty = {}, 0
    try:
        with tarfile.open(tarball) as tar:
            for m in tqdm(tar, desc=f"reading {os.path.basename(tarball)}", unit=' members'):
                if m.isfile() and m.name.endswith(SUFFIX):
                    data = tar.extractfile(m).read()
                    if data:
                        files[m.name] = data
                    else:
                        empty += 1
    except (OSError, tarfile.TarError) as e:
        raise DataError(f"cannot read {tarball}: {e} (delete it and run again)") from None
    return files, empty

def split_files(paths):
    """(train, val) lists of paths, each sorted. val: crc32(path) % VAL_EVERY == 0. A tiny
    archive where that rule takes none (or all) holds out its last file instead."""
    paths = sorted(paths)
    val = [p for p in paths if zlib.crc32(p.encode()) % VAL_EVERY == 0]
    if not val or len(val) == len(paths):
        val = paths[-1:]
    held = set(val)
    return [p for p in paths if p not in held], val

def encode(files, paths, eot):
    """The documents' bytes in order, each followed by eot: a (sum of sizes + len(paths),) uint16 array."""
    end = np.array([eot], dtype=np.uint16)
    parts = [a for p in paths for a in (np.frombuffer(files[p], dtype=np.uint8).astype(np.uint16), end)]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)

# -----------------------------------------------------------------------------

def prepare(out_dir=None, cache_dir=None, packages=PACKAGES):
    """Write train.bin, val.bin and meta.pkl into out_dir (default: this folder) and return
    the meta dict. Raises DataError when an archive cannot be fetched, does not match its
    sha256 or holds fewer than 2 files; existing outputs are only replaced once all are written."""
    out_dir = out_dir or HERE
    files, empty = {}, 0
    for tarball in fetch(packages, cache_dir or CACHE_DIR):
        got, n_empty = read_files(tarball)
        files.update(got)
        empty += n_empty
    if len(files) < 2:
        raise DataError(f"the archives hold {len(files)} non-empty *{SUFFIX} files, need at least 2")
    train_files, val_files = split_files(files)

    meta = meta_for('bytes', eot=True)                   # vocab 257: bytes 0-255, <|endoftext|> = 256
    train_ids = encode(files, train_files, meta['eot_token'])
    val_ids = encode(files, val_files, meta['eot_token'])
    meta.update(source=', '.join(f"{p} sdist (sha256 {s}), *{SUFFIX}" for p, _, s in packages),
                packages=[p for p, _, _ in packages], license=LICENSE, val_files=val_files,
                train_docs=len(train_files), val_docs=len(val_files), empty_files=empty,
                train_bytes=len(train_ids) - len(train_files), val_bytes=len(val_ids) - len(val_files),
                train_tokens=len(train_ids), val_tokens=len(val_ids))

    write_dataset(out_dir, train_ids, val_ids, meta)

    print(f"source: {meta['source']}")
    print(f"documents: train {len(train_files):,}, val {len(val_files):,} ({empty} empty files skipped); "
          f"bytes: train {meta['train_bytes']:,}, val {meta['val_bytes']:,}")
    print_written(meta, out_dir)
    return meta

def main(argv=None):
    p = ArgumentParser(prog='prepare.py', description=__doc__.strip().splitlines()[0])
    p.add_argument('--out_dir', '--out-dir', dest='out_dir', default=None,
                   help="output folder (default: the script's folder)")
    p.add_argument('--cache_dir', '--cache-dir', dest='cache_dir', default=None,
                   help="where the sdists are downloaded to and read from (default: cache/ beside the script)")
    args = p.parse_args(argv)
    try:
        prepare(args.out_dir, args.cache_dir)
    except (DataError, OSError) as e:  # OSError: e.g. out_dir not writable
        fail(p.prog, str(e))
    return 0

if __name__ == '__main__':
    sys.exit(main())
