"""
The tutorial's quotes are the code as it is. pytest runs every chapter's `>>>` examples as doctests (pytest.ini);
this checks the other half: each ```python block without `>>>` in tutorial/*.md is a quote, and its lines stand,
in order and contiguous, in one of the repository's Python files (a line `...` in a quote skips lines there).
Runnable scripts in the chapters are ```py blocks and commands ```bash blocks: they are not quotes.
"""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHAPTERS = sorted(glob.glob(os.path.join(ROOT, 'tutorial', '*.md')))
SOURCES = sorted(glob.glob(os.path.join(ROOT, '*.py')) + glob.glob(os.path.join(ROOT, 'law', '*.py'))
                 + glob.glob(os.path.join(ROOT, 'sweeps', '*.py')) + glob.glob(os.path.join(ROOT, 'tools', '*.py')))


def quotes(path):
    with open(path, encoding='utf-8') as f:
        text = f.read()
    for m in re.finditer(r'^```python\n(.*?)^```', text, flags=re.S | re.M):
        if '>>>' not in m.group(1):
            yield text[:m.start()].count('\n') + 2, m.group(1).rstrip('\n').split('\n')


def found_in(lines, source):
    """lines, split at '...' lines into chunks, each contiguous in source, in order."""
    chunks, chunk = [], []
    for line in lines:
        if line.strip() == '...':
            chunks.append(chunk)
            chunk = []
        else:
            chunk.append(line)
    chunks.append(chunk)
    at = 0
    for chunk in filter(None, chunks):
        n = len(chunk)
        at = next((i + n for i in range(at, len(source) - n + 1) if source[i:i + n] == chunk), None)
        if at is None:
            return False
    return True


def read_lines(path):
    with open(path, encoding='utf-8') as f:
        return f.read().split('\n')


def test_every_chapter_has_examples_and_is_in_the_index_in_order():
    numbered = [os.path.basename(p) for p in CHAPTERS if re.match(r'\d\d_', os.path.basename(p))]
    assert len(numbered) >= 12
    for name in numbered:
        with open(os.path.join(ROOT, 'tutorial', name), encoding='utf-8') as f:
            assert '\n>>> ' in f.read(), f"tutorial/{name} has no runnable example"
    with open(os.path.join(ROOT, 'tutorial', 'README.md'), encoding='utf-8') as f:
        index = f.read()
    assert sorted(numbered, key=index.find) == numbered and all(f'({n})' in index for n in numbered)


@pytest.mark.parametrize('chapter', [os.path.basename(p) for p in CHAPTERS])
def test_quotes_are_the_code_as_it_is(chapter):
    sources = {p: read_lines(p) for p in SOURCES}
    for line_no, lines in quotes(os.path.join(ROOT, 'tutorial', chapter)):
        assert any(found_in(lines, src) for src in sources.values()), \
            f"tutorial/{chapter}:{line_no}: this quote is not in the code as it is now:\n" + '\n'.join(lines)


def test_the_run_folders_named_are_the_ones_train_py_writes():
    """A run folder `out.../` that the tutorial, the docs or the README name is one train.py writes by default,
    out-<model>/ (the Quickstart's run is out-xmod/: there is no out/)."""
    import xmod
    folders = {f'out-{model}' for model in xmod.MODELS}
    docs = CHAPTERS + sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md'))) + [os.path.join(ROOT, 'README.md')]
    named = []
    for path in docs:
        with open(path, encoding='utf-8') as f:
            text = f.read()
        named += [(os.path.relpath(path, ROOT), m) for m in re.findall(r'(?<![\w./-])(out(?:-[\w-]+)?)/', text)]
    assert named and [(path, folder) for path, folder in named if folder not in folders] == []
