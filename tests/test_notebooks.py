"""The tutorial's notebooks (tutorial/notebooks/, built by tutorial/make_notebooks.py): each is its chapter's build,
and each runs top to bottom in a fresh kernel on the CPU (tutorial/run_notebooks.py, which says what each did)."""
import os
import subprocess
import sys

import make_notebooks  # tutorial/ is on the path (pytest.ini)
import pytest
import run_notebooks

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
    ran = run_notebooks.run(make_notebooks.notebook_path(md), timeout=300)
    assert ran.error is None, ran.error
    nb = ran.nb
    assert not [c for c in nb.cells if c.cell_type == 'code' and c.source.startswith('%%')]
    outputs = [o for c in nb.cells if c.cell_type == 'code' for o in c.outputs]
    assert outputs and not [o for o in outputs if o.output_type == 'error']
    if os.path.basename(md) == '01_layout.md':
        assert any('DrrrDrrrDrrr' in str(o.get('data', {}).get('text/plain', '')) for o in outputs)


def test_the_runner_says_what_each_notebook_did(tmp_path):
    """The terminal command for a notebook prints a line per notebook (its code cells, or the cell that raised and
    its error) and a count, exits 1 when one raised, and shows no kernel start-up warning."""
    pytest.importorskip('nbclient')
    pytest.importorskip('ipykernel')
    import nbformat
    cells = [nbformat.v4.new_code_cell('x = 1'), nbformat.v4.new_markdown_cell('Prose.'),
             nbformat.v4.new_code_cell('print(x)\nint("a")'), nbformat.v4.new_code_cell('print("not reached")')]
    good, bad = str(tmp_path / 'good.ipynb'), str(tmp_path / 'bad.ipynb')
    nbformat.write(nbformat.v4.new_notebook(cells=cells[:2] + [nbformat.v4.new_code_cell('x + 1')]), good)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), bad)
    r = subprocess.run([sys.executable, os.path.join('tutorial', 'run_notebooks.py'), good, bad], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{good}: ran all 2 code cells without an error (" in r.stdout
    assert (f"{bad}: failed at cell 2 of 3 (print(x)): ValueError: invalid literal for int() with base 10: 'a'"
            in r.stdout.splitlines())
    assert r.stdout.splitlines()[-1] == '1 of 2 notebooks failed: bad.ipynb'
    assert 'WARNING' not in r.stderr, r.stderr


@pytest.mark.parametrize('args,says', [(['no/such.ipynb'], "no notebook 'no/such.ipynb'"), (['13'], "no notebook '13'")])
def test_the_runner_refuses_a_notebook_that_is_not_there(args, says, capsys):
    assert run_notebooks.run_main('run_notebooks.py', run_notebooks.main, args) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and says in err, err


def test_the_runner_takes_a_chapter_number():
    assert run_notebooks.notebooks(['1']) == [make_notebooks.notebook_path(make_notebooks.chapters()[0])]
    assert len(run_notebooks.notebooks([])) == len(make_notebooks.chapters())


def test_the_documented_notebook_command_is_the_runner():
    """The tutorial's README and the setup sheet give the command that says what it ran, not a bare nbclient call
    that prints nothing."""
    for doc in ('README.md', 'TEACHERS.md'):
        with open(os.path.join(ROOT, 'tutorial', doc), encoding='utf-8') as f:
            text = f.read()
        assert 'python tutorial/run_notebooks.py 1' in text and 'NotebookClient(nb).execute()' not in text, doc


def setup_cell(cwd, **env):
    """The notebooks' first cell, run by a fresh interpreter in cwd (which holds no checkout), then where it left
    the notebook and whether xmod imports from there."""
    code = make_notebooks.SETUP + "\nimport xmod\nprint(os.getcwd(), os.path.dirname(os.path.abspath(xmod.__file__)))"
    env = {k: v for k, v in os.environ.items() if k != 'XMOD_REPO'} | env | {'PIP_DISABLE_PIP_VERSION_CHECK': '1'}
    return subprocess.run([sys.executable, '-c', code], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def test_on_a_fresh_machine_the_first_cell_clones_the_repository_xmod_repo_names(tmp_path):
    """The hosted-notebook path of the setup sheet: with no checkout around, the first cell asks for XMOD_REPO, then
    clones the repository it names (its git URL; here this checkout's own) and works from the clone."""
    if subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip('the repository is not a git checkout here: nothing to clone')
    r = setup_cell(tmp_path)
    assert r.returncode != 0 and "set XMOD_REPO to the xmod repository's git URL" in r.stderr, r.stderr
    with open(os.path.join(ROOT, 'tutorial', 'TEACHERS.md'), encoding='utf-8') as f:
        assert "os.environ['XMOD_REPO'] = 'ADDRESS'" in f.read()           # what the setup sheet has them add
    r = setup_cell(tmp_path, XMOD_REPO='file://' + ROOT)
    clone = str(tmp_path / 'xmod')
    assert r.returncode == 0 and r.stdout.split() == [clone, clone], r.stdout + r.stderr
