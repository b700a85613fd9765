"""
run_notebooks.py: run the tutorial's notebooks top to bottom from a terminal, and say what each did.

    python tutorial/run_notebooks.py                                      # all twelve, in order
    python tutorial/run_notebooks.py 3                                    # chapter 3's: tutorial/notebooks/03_*.ipynb
    python tutorial/run_notebooks.py tutorial/notebooks/01_layout.ipynb   # a notebook by its path (several: each)

Each notebook runs in a fresh Python kernel, as Jupyter's "Run all" would, in the notebook's own folder, with
nbclient and ipykernel (the README's Quickstart installs them; no Jupyter needed). It prints one line per notebook:
how many code cells ran and how long it took, or the first cell that raised, with its error; then a last line that
counts them. The notebooks are not written back: what they show stays as make_notebooks.py built it. Exit status 0
when every notebook ran without an error, 1 when one raised, 2 on bad input (a notebook that is not there, nbclient
or ipykernel missing; one line on stderr).
"""
import glob
import os
import sys
import time
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from configurator import UserError, configure, defaults_of, one_line, run_main  # noqa: E402

NOTEBOOKS = os.path.join(ROOT, 'tutorial', 'notebooks')

# (configurator.py): the notebooks, or chapter numbers, are bare arguments; --key=value or --key value
timeout = 300        # seconds one cell may run before the notebook counts as failed
DEFAULTS = defaults_of(globals())


def notebooks(args):
    """The paths the arguments name, in order: every notebook of tutorial/notebooks/ when there are none."""
    if not args:
        return sorted(glob.glob(os.path.join(NOTEBOOKS, '[0-9][0-9]_*.ipynb')))
    paths = []
    for arg in args:
        found = ([arg] if arg.endswith('.ipynb') and os.path.isfile(arg) else
                 glob.glob(os.path.join(NOTEBOOKS, f'{int(arg):02d}_*.ipynb')) if arg.isdigit() else [])
        if not found:
            raise UserError(f"no notebook {arg!r}: give a path to an .ipynb or a chapter number (1 to 12)")
        paths += found
    return paths


Ran = namedtuple('Ran', 'nb cells seconds error')


def run(path, timeout=300):
    """Run the notebook at path in a fresh kernel, in its folder: a Ran of the executed notebook (its outputs in its
    cells), its number of code cells, the seconds it took and the error, None or 'cell N of M (its first line):
    Type: message' for the first code cell that raised (counted from 1)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError
    nb = nbformat.read(path, as_version=4)
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == 'code']
    # the kernel logs only errors: its default start-up warning about TCP without encryption (the kernel and this
    # process talk on this machine's loopback) read as if something went wrong
    client = NotebookClient(nb, timeout=timeout, kernel_name='python3', extra_arguments=['--log-level=ERROR'],
                            resources={'metadata': {'path': os.path.dirname(os.path.abspath(path))}})
    t0 = time.time()
    try:
        client.execute()
        error = None
    except (CellExecutionError, CellTimeoutError) as e:
        failed = next((i for i in code if any(o.get('output_type') == 'error' for o in nb.cells[i].get('outputs', []))),
                      None)
        if failed is None:                                          # a timeout leaves no error output
            failed = next((i for i in code if nb.cells[i].get('execution_count') is None), code[-1])
        outputs = [o for o in nb.cells[failed].get('outputs', []) if o.get('output_type') == 'error']
        what = (f"{outputs[0]['ename']}: {one_line(outputs[0]['evalue'])}" if outputs else
                f"{type(e).__name__}: {one_line(e)}")
        first = nb.cells[failed].source.strip().split('\n')[0]
        error = f"cell {code.index(failed) + 1} of {len(code)} ({first[:60]}): {what}"
    return Ran(nb, len(code), time.time() - t0, error)


def main(argv):
    args = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=args)
    paths = notebooks(args)
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
    except ImportError as e:
        raise UserError(f"needs nbclient and ipykernel ({e.name} is missing): pip install nbclient ipykernel") from None
    failed = []
    for path in paths:
        name = os.path.relpath(path) if not os.path.relpath(path).startswith('..') else path
        ran = run(path, cfg.timeout)
        if ran.error is None:
            print(f"{name}: ran all {ran.cells} code cells without an error ({ran.seconds:.1f} s)")
        else:
            print(f"{name}: failed at {ran.error}")
            failed.append(os.path.basename(path))
    print(f"{len(paths)} of {len(paths)} notebooks ran without an error" if not failed else
          f"{len(failed)} of {len(paths)} notebooks failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(run_main('run_notebooks.py', main))
