"""
The tutorial's chapters as notebooks, built from the Markdown and never edited by hand:

    pip install jupytext nbclient ipykernel          # development tools: nothing else in the project needs them
    python tutorial/make_notebooks.py                # tutorial/notebooks/NN_name.ipynb from tutorial/NN_name.md
    python tutorial/make_notebooks.py --check        # exit 1, naming them, when a notebook is not its chapter's build

A chapter's examples (```python blocks with >>> prompts, which pytest runs as doctests) become code cells: each
example's source, prompts stripped; the notebook prints what the doctest checks. Code the chapter quotes from the
repository (```python blocks without prompts) stays in the markdown, as do the prose, the figures and the shell
commands (```bash blocks: the reader runs them in a terminal; in a cell, "Run all" would start an hour's sweep). jupytext reads
the result as Markdown; the cells get ids from their position, so a rebuild of an unchanged chapter is byte-identical.

The first cell makes a notebook work where it is opened: in tutorial/notebooks/ of a checkout it moves to the
repository's root; on a fresh hosted machine it clones the repository (XMOD_REPO: its git URL) and installs its
requirements. Either way the root and tutorial/ go on the import path, as pytest.ini puts them for the doctests.
"""
import doctest
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'notebooks')
BLOCK = re.compile(r'^```python\n(.*?)^```\n?', re.S | re.M)
OTHER = re.compile(r'^```(?!python\n)\w+\n.*?^```\n?', re.S | re.M)     # ```bash, ```text, ...: shown, never run

SETUP = '''# Setup: find the repository (or clone it on a fresh machine), then put it on the import path.
import os, subprocess, sys
if not os.path.exists('xmod.py'):
    if os.path.exists(os.path.join('..', '..', 'xmod.py')):      # opened from tutorial/notebooks/ of a checkout
        os.chdir(os.path.join('..', '..'))
    else:                                                        # a hosted notebook: clone the repository first
        repo = os.environ.get('XMOD_REPO', '')
        assert repo, "set XMOD_REPO to the xmod repository's git URL (os.environ['XMOD_REPO'] = '...'), then rerun"
        subprocess.run(['git', 'clone', '--depth=1', repo, 'xmod'], check=True)
        os.chdir('xmod')
        subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '-r', 'requirements.txt'], check=True)
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), 'tutorial')]'''


def chapter_markdown(text):
    """The chapter as jupytext Markdown: examples as ```python code cells, quoted code as markdown regions."""
    # a shell block is a command for the reader's terminal (some train for minutes or run a sweep for hours): as a
    # %%bash cell, "Run all" would start it, so it stays in the markdown, as output blocks do
    text = OTHER.sub(lambda m: f"<!-- #region -->\n{m.group(0)}<!-- #endregion -->\n", text)
    parser, out, at = doctest.DocTestParser(), [], 0
    for m in BLOCK.finditer(text):
        out.append(text[at:m.start()])
        body = m.group(1)
        if '>>>' in body:
            for ex in parser.get_examples(body):
                src = ex.source.rstrip()
                if ex.exc_msg is not None:         # the chapter shows this error: the notebook prints it, and goes on
                    body_ = '\n'.join('    ' + line for line in src.split('\n'))
                    src = f"try:\n{body_}\nexcept Exception as e:\n    print(f'{{type(e).__name__}}: {{e}}')"
                out.append(f"```python\n{src}\n```\n\n")
        else:
            out.append(f"<!-- #region -->\n```python\n{body}```\n<!-- #endregion -->\n")
        at = m.end()
    out.append(text[at:])
    return ''.join(out)


def build(md_path):
    """The notebook of one chapter, as the text of its .ipynb."""
    import jupytext
    import nbformat
    with open(md_path, encoding='utf-8') as f:
        text = f.read()
    text = re.sub(r'\]\((?!https?:|#)([^)]+)\)', lambda m: f"]({os.path.join('..', m.group(1))})", text)  # links
    nb = jupytext.reads(chapter_markdown(text), fmt='md')
    nb.cells.insert(0, nbformat.v4.new_code_cell(SETUP))
    for i, cell in enumerate(nb.cells):
        cell.id = f'cell-{i}'
        cell.metadata = {}
    nb.metadata = {'kernelspec': {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'},
                   'language_info': {'name': 'python'}}
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nbformat.writes(nb) + '\n'


def notebook_path(md_path):
    return os.path.join(OUT, os.path.basename(md_path)[:-3] + '.ipynb')


def chapters():
    return sorted(p for p in glob.glob(os.path.join(HERE, '[0-9][0-9]_*.md')))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    check = argv == ['--check']
    if argv and not check:
        print("make_notebooks.py: error: the one option is --check", file=sys.stderr)
        return 2
    try:
        import jupytext  # noqa: F401
    except ImportError:
        print("make_notebooks.py: error: needs jupytext: pip install jupytext", file=sys.stderr)
        return 2
    stale = []
    os.makedirs(OUT, exist_ok=True)
    for md in chapters():
        path, text = notebook_path(md), build(md)
        old = open(path, encoding='utf-8').read() if os.path.exists(path) else None
        if old != text:
            stale.append(os.path.relpath(path, os.path.dirname(HERE)))
            if not check:
                with open(path, 'w', encoding='utf-8') as f:
                    f.write(text)
    if check and stale:
        print(f"out of date (python tutorial/make_notebooks.py rebuilds them): {', '.join(stale)}", file=sys.stderr)
        return 1
    print(f"{'checked' if check else 'wrote'} {len(chapters())} notebooks in tutorial/notebooks/"
          + (f" ({len(stale)} changed)" if not check else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
