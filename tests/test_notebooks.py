"""The tutorial's notebooks (tutorial/notebooks/, built by tutorial/make_notebooks.py): each is its chapter's build,
and each runs top to bottom in a fresh kernel on the CPU."""
import os

import make_notebooks  # tutorial/ is on the path (pytest.ini)
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_notebook_is_its_chapters_build():
    pytest.importorskip('jupytext')
    assert make_notebooks.main(['--check']) == 0
    chapters = make_notebooks.chapters()
    assert len(chapters) == 12 and all(os.path.exists(make_notebooks.notebook_path(md)) for md in chapters)
    with open(os.path.join(ROOT, 'tutorial', 'README.md'), encoding='utf-8') as f:
        readme = f.read()
    for md in chapters:
        assert f"notebooks/{os.path.basename(make_notebooks.notebook_path(md))}" in readme, md


def test_examples_become_cells_and_quotes_stay_markdown():
    pytest.importorskip('jupytext')
    text = ("Prose.\n\n```python\ndef quoted():\n    pass\n```\n\n```python\n>>> x = 1\n>>> x + 1\n2\n"
            ">>> int('a')\nTraceback (most recent call last):\nValueError: nope\n```\n")
    import jupytext
    nb = jupytext.reads(make_notebooks.chapter_markdown(text), fmt='md')
    code = [c.source for c in nb.cells if c.cell_type == 'code']
    assert code[:2] == ['x = 1', 'x + 1'] and code[2].startswith('try:\n    int(') and len(code) == 3
    assert any('def quoted' in c.source for c in nb.cells if c.cell_type == 'markdown')


def test_shell_blocks_stay_markdown_so_run_all_starts_no_training():
    pytest.importorskip('jupytext')
    text = "Run it:\n\n```bash\npython sweeps/classroom.py\n```\n\n```python\n>>> 1 + 1\n2\n```\n"
    import jupytext
    nb = jupytext.reads(make_notebooks.chapter_markdown(text), fmt='md')
    assert [c.source for c in nb.cells if c.cell_type == 'code'] == ['1 + 1']
    assert any('sweeps/classroom.py' in c.source for c in nb.cells if c.cell_type == 'markdown')


@pytest.mark.parametrize('md', make_notebooks.chapters(), ids=lambda p: os.path.basename(p)[:-3])
def test_each_notebook_runs_top_to_bottom(md):
    """A fresh kernel, every cell in order, on the CPU: seconds each, since the shell blocks are not cells."""
    pytest.importorskip('nbclient')
    pytest.importorskip('ipykernel')
    import nbformat
    from nbclient import NotebookClient
    path = make_notebooks.notebook_path(md)
    nb = nbformat.read(path, as_version=4)
    assert not [c for c in nb.cells if c.cell_type == 'code' and c.source.startswith('%%')]
    NotebookClient(nb, timeout=300, kernel_name='python3',
                   resources={'metadata': {'path': os.path.dirname(path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == 'code' for o in c.outputs]
    assert outputs and not [o for o in outputs if o.output_type == 'error']
    if os.path.basename(md) == '01_layout.md':
        assert any('DrrrDrrrDrrr' in str(o.get('data', {}).get('text/plain', '')) for o in outputs)
