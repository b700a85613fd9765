"""
Tokenizers, the pinned-sdist download and the few write helpers shared by the
data/*/prepare.py scripts.

Import it as `data.tokenizers` with the repo root on sys.path (train.py and
sample.py live there, so that is automatic for them). It is deliberately not put
on sys.path as a top-level `tokenizers`: Hugging Face ships a package of that
name, and `datasets` users may have it installed.

Three tokenizers:
  char   vocabulary = sorted set of the characters of the whole text, kept in meta.pkl
  gpt2   tiktoken's GPT-2 BPE (50257 tokens), online or from a local gpt2.tiktoken file
  bytes  the 256 single bytes as a tiktoken.Encoding: no file, no network, any text

Every dataset writes meta.pkl next to train.bin/val.bin; from_meta(meta) rebuilds
encode/decode from it, which is all sample.py needs. Tokens are stored as uint16.
"""

import argparse
import contextlib
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import tiktoken
import tiktoken.load

EOT = '<|endoftext|>'
GPT2_EOT_ID = 50256    # id of <|endoftext|> in GPT-2: right after its 50256 BPE ranks
MAX_VOCAB = 65536      # tokens are stored as uint16
TOKENIZERS = ('char', 'gpt2', 'bytes')

# GPT-2 (r50k_base) pre-tokenizer regex. We take it from tiktoken at run time so we
# follow tiktoken if it ever changes; this copy is only a fallback for a tiktoken
# without the tiktoken_ext plugin.
try:
    from tiktoken_ext.openai_public import r50k_pat_str as GPT2_PAT_STR
except ImportError:
    GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

class DataError(Exception):
    """A problem the user can fix (bad path, no network, unknown name): the CLIs
    print it as one line and exit 2, without a traceback."""

# -----------------------------------------------------------------------------
# tokenizers

def get_encoding(kind, tiktoken_file=None, eot=False):
    """tiktoken.Encoding for kind 'gpt2' or 'bytes'.

    gpt2: the online tiktoken encoding unless tiktoken_file (a gpt2.tiktoken ranks
    file, `base64token rank` per line) is given. <|endoftext|> gets id 50256 when the
    file has the full 50256 ranks; a smaller file (tests build tiny ones) gets the
    next free id, len(ranks), so the vocabulary stays dense.
    bytes: 256 tokens, one per byte. With eot=True it also gets <|endoftext|> = 256
    (vocab 257), for corpora that separate documents with it (openwebtext).
    """
    if kind == 'bytes':
        ranks = {bytes([i]): i for i in range(256)}
        # with no merges the split cannot change the output; GPT-2's regex just keeps
        # the pieces word-sized, which is what tiktoken is fast at
        special = {EOT: 256} if eot else {}
        return tiktoken.Encoding('bytes', pat_str=GPT2_PAT_STR, mergeable_ranks=ranks,
                                 special_tokens=special)
    check_tokenizer(kind)
    if tiktoken_file is None:
        try:
            return tiktoken.get_encoding('gpt2')
        except Exception as e:  # tiktoken fetches its BPE files over the network
            raise DataError(
                f"could not load the gpt2 tokenizer online ({type(e).__name__}); pass "
                "--tiktoken-file PATH to a gpt2.tiktoken file (one ships in PyPI's "
                "openai-whisper sdist at whisper/assets/gpt2.tiktoken)") from None
    if not os.path.isfile(tiktoken_file):
        raise DataError(f"tiktoken file not found: {tiktoken_file}")
    try:
        ranks = tiktoken.load.load_tiktoken_bpe(tiktoken_file)
    except Exception as e:
        raise DataError(f"cannot read tiktoken file {tiktoken_file}: {e}") from None
    full = len(ranks) == GPT2_EOT_ID
    return tiktoken.Encoding('gpt2', pat_str=GPT2_PAT_STR, mergeable_ranks=ranks,
                             special_tokens={EOT: GPT2_EOT_ID if full else len(ranks)},
                             # the real file gets tiktoken's own consistency check
                             explicit_n_vocab=GPT2_EOT_ID + 1 if full else None)

def check_tokenizer(kind):
    if kind not in TOKENIZERS:
        raise DataError(f"unknown tokenizer {kind!r}: expected one of {', '.join(TOKENIZERS)}")

def char_vocab(text):
    """The char tokenizer's vocabulary: every distinct character, sorted."""
    return sorted(set(text))

def meta_for(kind, text=None, tiktoken_file=None, eot=False):
    """The tokenizer part of meta.pkl. char needs the whole text (train and val, so
    every val character is encodable); gpt2 may name a local tiktoken_file; eot asks
    the bytes tokenizer for an <|endoftext|> token (gpt2 always has one).
    vocab_size is the real vocabulary (50257 for gpt2): train.py may pad it."""
    if kind == 'char':
        if text is None:
            raise ValueError("the char tokenizer needs the text to build its vocabulary")
        itos = char_vocab(text)
        meta = {'tokenizer': 'char', 'vocab_size': len(itos), 'eot_token': None,
                'itos': {i: c for i, c in enumerate(itos)},
                'stoi': {c: i for i, c in enumerate(itos)}}
    else:
        if tiktoken_file is not None:
            tiktoken_file = os.path.abspath(tiktoken_file)  # sample.py may run elsewhere
        enc = get_encoding(kind, tiktoken_file, eot)
        meta = {'tokenizer': kind, 'vocab_size': enc.n_vocab,
                'eot_token': enc.eot_token if EOT in enc.special_tokens_set else None,
                'tiktoken_file': tiktoken_file}
    if meta['vocab_size'] > MAX_VOCAB:
        raise DataError(f"vocab_size {meta['vocab_size']} does not fit in uint16")
    return meta

def encoding_from_meta(meta):
    """The tiktoken.Encoding a gpt2/bytes meta.pkl was written with."""
    return get_encoding(meta['tokenizer'], meta.get('tiktoken_file'),
                        eot=meta.get('eot_token') is not None)

def from_meta(meta, allow_special=True):
    """(encode, decode) rebuilt from a meta.pkl dict: encode(str) -> list[int],
    decode(list[int]) -> str. With allow_special a literal '<|endoftext|>' in the
    string becomes the special token (what a sample.py prompt wants); the prepare
    scripts pass False so corpus text is always plain text."""
    if meta['tokenizer'] == 'char':
        stoi, itos = meta['stoi'], meta['itos']
        def encode(s):
            try:
                return [stoi[c] for c in s]
            except KeyError as e:
                raise ValueError(f"character {e.args[0]!r} is not in the char vocabulary") from None
        def decode(ids):
            return ''.join(itos[int(i)] for i in ids)
        return encode, decode
    enc = encoding_from_meta(meta)
    if allow_special:
        encode = lambda s: enc.encode(s, allowed_special='all')
    else:
        encode = enc.encode_ordinary
    # bytes ids can end mid-character: decode with replacement instead of failing
    decode = lambda ids: enc.decode([int(i) for i in ids], errors='replace')
    return encode, decode

def load_meta(path):
    with open(path, 'rb') as f:
        return pickle.load(f)

# -----------------------------------------------------------------------------
# pinned source distributions

def pip_sdist(package, filename, cache_dir, hint=''):
    """Path to the source distribution `filename` of `package` ('name==version'),
    fetched by pip into cache_dir on first use (pip only, so whatever index and proxy
    the user's pip is set up for is used). hint ends the error if it cannot be fetched."""
    path = os.path.join(cache_dir, filename)
    if os.path.isfile(path):
        return path
    print(f"downloading {package} (sdist) into {cache_dir} with pip ...")
    os.makedirs(cache_dir, exist_ok=True)
    # into a folder of this process's own, then moved into place at once: a second process
    # downloading beside it never sees a half-written file at `path`
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        cmd = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--no-binary', ':all:',
               '--disable-pip-version-check', package, '-d', tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not os.path.isfile(os.path.join(tmp, filename)):
            last = (r.stderr.strip().splitlines() or ['no output'])[-1]
            raise DataError(f"could not download {package} with pip ({last})" + (f"; {hint}" if hint else ''))
        os.replace(os.path.join(tmp, filename), path)
    return path

def check_sha256(path, sha256):
    """Raise DataError unless the file's sha256 is the pinned one. The file is kept:
    the message says what to do with it."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    if h.hexdigest() != sha256:
        raise DataError(f"{path} has sha256 {h.hexdigest()}, not the pinned {sha256} "
                        "(a changed or damaged download: delete it and run again)")

# -----------------------------------------------------------------------------
# writing outputs

def to_uint16(ids, vocab_size):
    assert vocab_size <= MAX_VOCAB, "tokens are stored as uint16"
    return np.asarray(ids, dtype=np.uint16)

@contextlib.contextmanager
def staged_outputs(out_dir, names):
    """Yield {name: temporary path}. The caller writes every output to its temp
    path; only when all of them are written are they moved into place (os.replace
    is atomic), so a failure never leaves a half-written or mismatched train.bin /
    val.bin / meta.pkl behind, and an existing good set is left untouched. The temp
    names carry the process id: two runs that prepare the same dataset at once (a
    sweep's first jobs on a fresh clone) each write their own, and the second
    replace puts the same bytes in place."""
    os.makedirs(out_dir, exist_ok=True)
    tmp = {n: os.path.join(out_dir, f'{n}.{os.getpid()}.tmp') for n in names}
    try:
        yield tmp
    except BaseException:
        for p in tmp.values():
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
        raise
    for n, p in tmp.items():
        os.replace(p, os.path.join(out_dir, n))

def write_dataset(out_dir, train_ids, val_ids, meta):
    """train.bin and val.bin (uint16 id arrays) and meta.pkl into out_dir, all or nothing."""
    with staged_outputs(out_dir, ['train.bin', 'val.bin', 'meta.pkl']) as tmp:
        train_ids.tofile(tmp['train.bin'])
        val_ids.tofile(tmp['val.bin'])
        write_meta(tmp['meta.pkl'], meta)

def write_meta(path, meta):
    with open(path, 'wb') as f:
        pickle.dump(meta, f)

def print_written(meta, out_dir):
    """The closing lines every prepare.py prints."""
    print(f"tokenizer: {meta['tokenizer']}, vocab size {meta['vocab_size']:,}")
    print(f"tokens: train {meta['train_tokens']:,}, val {meta['val_tokens']:,}")
    print(f"wrote {os.path.join(out_dir, '{train.bin,val.bin,meta.pkl}')}")

# -----------------------------------------------------------------------------
# command line

class ArgumentParser(argparse.ArgumentParser):
    """argparse (so both --key=value and --key value work) whose errors are one line
    on stderr and exit code 2, like every other user error of the prepare scripts."""
    def error(self, message):
        fail(self.prog, message)

def prepare_parser(doc, default_tokenizer):
    """The command line every prepare.py shares: --tokenizer, --tiktoken-file, --out_dir
    (dashes or underscores); each script adds its own source flags."""
    p = ArgumentParser(prog='prepare.py', description=doc.strip().splitlines()[0])
    p.add_argument('--tokenizer', default=default_tokenizer,
                   help=f"{', '.join(TOKENIZERS)} (default {default_tokenizer})")
    p.add_argument('--tiktoken-file', '--tiktoken_file', dest='tiktoken_file', default=None,
                   help="local gpt2.tiktoken ranks file, to use --tokenizer=gpt2 offline")
    p.add_argument('--out_dir', '--out-dir', dest='out_dir', default=None,
                   help="output folder (default: the script's folder)")
    return p

def fail(prog, message):
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)
